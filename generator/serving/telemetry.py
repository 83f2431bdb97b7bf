"""Quality telemetry: counted per batch on the request path, published off it.

A step adds each batch's counts to a ``Tally`` (a few NumPy reductions, microseconds) and a ``Publisher``
thread hands the accumulated increments to the metrics sink once a second. The Python backend's
``Metric.increment`` is a round trip to the server process (0.2-0.6 ms), so it is never called per request,
and the number of calls per second does not grow with the traffic.

Histograms are written as the three series of a Prometheus histogram (``NAME_bucket{le}`` cumulative,
``NAME_sum``, ``NAME_count``), each a counter: Triton's own histogram kind takes one ``observe`` call per
value, which would mean one round trip per detection. 2.51's Python backend does have that kind
(``pb_utils.MetricFamily.HISTOGRAM`` with ``buckets``, ``Metric.observe``; its stub names
``SendObserveRequest``), and no call that adds a count: even observing each bucket's mean n times (exact buckets,
sum and count) costs one round trip per value, ~11,000 a second at the GPU host's 1,140 images/s. So on Triton's
endpoint the parts stay counters (TYPE ``counter``, which ``promtool check metrics`` refuses); the watchdog's
endpoint serves them as one TYPE ``histogram`` family each, same names and labels, read from Triton's at scrape
time (generator/server/histogram_export.py), and Prometheus' job of Triton's endpoint drops the parts (issue 37).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .contract import (
    BATCHES_METRIC,
    CAPPED_OUTPUTS_METRIC,
    DETECTIONS_BUCKETS,
    DETECTIONS_METRIC,
    EMPTY_OUTPUTS_METRIC,
    IMAGES_METRIC,
    PHASE_SECONDS_METRIC,
    REJECTED_METRIC,
    REJECTION_REASONS,
    SCORE_BUCKETS,
    SCORE_METRIC,
)

# What each metric family says on the metrics endpoint (# HELP), by name.
HELP = {
    IMAGES_METRIC: "Images that reached this step of the ensemble",
    EMPTY_OUTPUTS_METRIC: "Images answered with zero detections",
    CAPPED_OUTPUTS_METRIC: "Images whose detections reached --max-detections (more may have been cut)",
    DETECTIONS_METRIC: "Detections returned per image",
    SCORE_METRIC: "Score of every returned detection",
    REJECTED_METRIC: "Images the preprocess step refused, by reason",
    PHASE_SECONDS_METRIC: "Wall seconds this step's execute spent in each phase of its batches",
    BATCHES_METRIC: "Batches this step's execute ran",
}

# A series of a step's metrics, less the model and version labels every one carries: the metric name and its
# own labels (sorted pairs).
Series = tuple[str, tuple[tuple[str, str], ...]]
Counts = dict[Series, float]


def bucket_label(bound: float) -> str:
    """The ``le`` label of a bucket bound, as Prometheus' Go client writes it (1, 0.5, +Inf)."""
    return "+Inf" if bound == float("inf") else format(bound, "g")


def histogram_series(name: str, bounds: Sequence[float]) -> list[Series]:
    """Every series of a histogram: one bucket per bound plus +Inf, then the sum and the count."""
    return list(_histogram_layout(name, tuple(bounds))[0])


@functools.lru_cache(maxsize=16)
def _histogram_layout(name: str, bounds: tuple[float, ...]) -> tuple[tuple[Series, ...], np.ndarray]:
    """The series of a histogram and its bounds as an array, made once: formatting them costs more than counting."""
    buckets = [(f"{name}_bucket", (("le", bucket_label(b)),)) for b in (*bounds, float("inf"))]
    return (*buckets, (f"{name}_sum", ()), (f"{name}_count", ())), np.asarray(bounds, dtype=np.float64)


def family_help(name: str) -> str:
    """HELP text of a counter family, histogram parts included (``NAME_bucket``, ``NAME_sum``, ``NAME_count``)."""
    for suffix, what in (("_bucket", "cumulative buckets"), ("_sum", "sum"), ("_count", "count")):
        if name.endswith(suffix) and name.removesuffix(suffix) in HELP:
            return f"{HELP[name.removesuffix(suffix)]} (histogram {what})"
    return HELP[name]


def histogram_counts(name: str, values: np.ndarray, bounds: Sequence[float]) -> Counts:
    """Increments of a histogram's series for ``values``: cumulative buckets (``value <= le``), sum, count."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    series, edges = _histogram_layout(name, tuple(bounds))
    per_bucket = np.bincount(np.searchsorted(edges, values, side="left"), minlength=len(edges) + 1)
    counts: Counts = {key: float(c) for key, c in zip(series[:-2], np.cumsum(per_bucket).tolist(), strict=True)}
    counts[series[-2]] = float(values.sum())
    counts[series[-1]] = float(len(values))
    return counts


def nms_series() -> list[Series]:
    """Every series the NMS step exports, so each exists (at 0) from the start."""
    return [
        (IMAGES_METRIC, ()), (EMPTY_OUTPUTS_METRIC, ()), (CAPPED_OUTPUTS_METRIC, ()),
        *histogram_series(DETECTIONS_METRIC, DETECTIONS_BUCKETS), *histogram_series(SCORE_METRIC, SCORE_BUCKETS),
    ]


def preprocess_series() -> list[Series]:
    """Every series the preprocess step exports: the images it got and its rejections by reason."""
    return [(IMAGES_METRIC, ()), *((REJECTED_METRIC, (("reason", r),)) for r in REJECTION_REASONS)]


def output_counts(num_detections: np.ndarray, scores: np.ndarray, max_detections: int) -> Counts:
    """What one NMS batch adds: images, empty and capped outputs, detections per image, detection scores.

    ``num_detections`` is [N, 1] (or [N]) and ``scores`` the padded [N, max_det]; only the first
    ``num_detections`` scores of each image are real detections.
    """
    counts = np.asarray(num_detections).reshape(-1).astype(np.int64)
    padded = np.asarray(scores).reshape(len(counts), -1)
    real = np.arange(padded.shape[1])[None, :] < counts[:, None]
    result: Counts = {
        (IMAGES_METRIC, ()): float(len(counts)),
        (EMPTY_OUTPUTS_METRIC, ()): float(np.count_nonzero(counts == 0)),
        (CAPPED_OUTPUTS_METRIC, ()): float(np.count_nonzero(counts >= max_detections)),
    }
    result.update(histogram_counts(DETECTIONS_METRIC, counts, DETECTIONS_BUCKETS))
    result.update(histogram_counts(SCORE_METRIC, padded[real], SCORE_BUCKETS))
    return result


def rejection_counts(images: int, reasons: Iterable[str]) -> Counts:
    """What one preprocess batch adds: the images it got, and its rejections by ``ImageError.reason``."""
    result: Counts = {(IMAGES_METRIC, ()): float(images)}
    for reason in reasons:
        key = (REJECTED_METRIC, (("reason", reason if reason in REJECTION_REASONS else "other"),))
        result[key] = result.get(key, 0.0) + 1.0
    return result


class Tally:
    """Increments accumulated since the last ``drain``, safe to add to from every thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Counts = {}

    def add(self, counts: Counts) -> None:
        with self._lock:
            for key, amount in counts.items():
                if amount:
                    self._pending[key] = self._pending.get(key, 0.0) + amount

    def drain(self) -> Counts:
        """The pending increments; the tally starts again from nothing."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending


class Publisher:
    """Every ``interval_s``, a daemon thread hands the tally's increments to ``increment``, one series at a time.

    When an increment fails, it and the ones not yet made go back into the tally for the next round, and the
    error goes to ``on_error`` (the model's logger). ``close`` stops the thread and publishes what is left.
    """

    def __init__(self, tally: Tally, increment: Callable[[Series, float], None], *, interval_s: float = 1.0,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.tally, self._increment, self.interval_s, self._on_error = tally, increment, interval_s, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry-publisher", daemon=True)

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def flush(self) -> None:
        pending = list(self.tally.drain().items())
        for done, (series, amount) in enumerate(pending):
            try:
                self._increment(series, amount)
            except Exception as exc:  # noqa: BLE001 -- telemetry must never take the step down
                self.tally.add(dict(pending[done:]))
                if self._on_error is not None:
                    self._on_error(exc)
                return

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.interval_s)
        self.flush()
