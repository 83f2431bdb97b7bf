"""What one side of a rollout (stable or canary) did in a traffic window, from two scrapes of Triton's metrics.

Triton's request counters and the Python steps' quality counters (generator/serving/telemetry.py) are cumulative,
so a window is the difference of a scrape at its start and one at its end, per model. The stable side is the
alias ensemble plus the stable version's own ensemble (``NAME`` and ``NAME_vS``), the canary side ``NAME_vC``;
the quality counters come from each side's NMS and preprocess steps. Latency is differenced too: Triton's
cumulative request duration (``nv_inference_request_duration_us``) over the window's requests gives each side's
mean for the record. Its latency summaries are not used: each reaches back its own 60 s (the canary's only over
its short life), so two of them never cover one period. The latency verdict comes from the rollout's own paired
requests (probes.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from generator.serving.contract import (
    CAPPED_OUTPUTS_METRIC,
    DETECTIONS_METRIC,
    EMPTY_OUTPUTS_METRIC,
    IMAGES_METRIC,
    REJECTED_METRIC,
    SCORE_METRIC,
)

SUCCESS = "nv_inference_request_success"
FAILURE = "nv_inference_request_failure"
DURATION = "nv_inference_request_duration_us"  # cumulative, every request (failed ones too), microseconds

# (metric name, sorted labels) -> value
Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _key(name: str) -> str:
    """A sample name without ``_total``: the parser adds it to every counter sample (OpenMetrics' rule), Triton's
    own counters lack it and the steps' have it."""
    return name.removesuffix("_total")


def parse_scrape(text: str) -> Scrape:
    """Every sample of a Prometheus text exposition, keyed by name (less ``_total``) and labels."""
    samples: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(_key(sample.name), tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def _total(scrape: Scrape, name: str, models: Iterable[str], **labels: str) -> float:
    wanted, name = set(models), _key(name)
    total = 0.0
    for (sample, sample_labels), value in scrape.items():
        found = dict(sample_labels)
        if sample == name and found.get("model") in wanted and all(found.get(k) == v for k, v in labels.items()):
            total += value
    return total


def _buckets(scrape: Scrape, name: str, models: Iterable[str]) -> dict[str, float]:
    """A histogram's cumulative buckets (``le`` -> count), summed over ``models``."""
    wanted = set(models)
    out: dict[str, float] = {}
    for (sample, sample_labels), value in scrape.items():
        found = dict(sample_labels)
        if sample == f"{name}_bucket" and found.get("model") in wanted:
            out[found["le"]] = out.get(found["le"], 0.0) + value
    return out


@dataclass(frozen=True)
class SideModels:
    """The models of one side: the ensembles its traffic enters and its NMS and preprocess steps."""

    ensembles: tuple[str, ...]
    nms: str
    preprocess: str


@dataclass(frozen=True)
class SideWindow:
    """One side's traffic in the window."""

    requests: float
    failures: float
    images: float
    empty: float
    capped: float
    rejected: float
    mean_ms: float | None  # Triton's own timing of the side's requests in the window (its probes included)
    detections_buckets: Mapping[str, float] = field(default_factory=dict)
    score_buckets: Mapping[str, float] = field(default_factory=dict)
    detections_sum: float = 0.0
    detections_count: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def share(self, count: float) -> float:
        return count / self.images if self.images else 0.0

    @property
    def mean_detections(self) -> float:
        return self.detections_sum / self.detections_count if self.detections_count else 0.0

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data.update(error_rate=self.error_rate, empty_share=self.share(self.empty),
                    capped_share=self.share(self.capped), mean_detections=self.mean_detections)
        return data


def side_window(before: Scrape, after: Scrape, models: SideModels) -> SideWindow:
    """The difference of two scrapes for one side (counters cannot go down; a restart would show as negative)."""
    def delta(name: str, which: Iterable[str], **labels: str) -> float:
        which = tuple(which)
        return max(_total(after, name, which, **labels) - _total(before, name, which, **labels), 0.0)

    def bucket_delta(name: str) -> dict[str, float]:
        start, end = _buckets(before, name, [models.nms]), _buckets(after, name, [models.nms])
        return {le: max(end[le] - start.get(le, 0.0), 0.0) for le in end}

    nms = [models.nms]
    return SideWindow(
        requests=delta(SUCCESS, models.ensembles) + delta(FAILURE, models.ensembles),
        failures=delta(FAILURE, models.ensembles),
        images=delta(IMAGES_METRIC, nms),
        empty=delta(EMPTY_OUTPUTS_METRIC, nms),
        capped=delta(CAPPED_OUTPUTS_METRIC, nms),
        rejected=delta(REJECTED_METRIC, [models.preprocess]),
        mean_ms=_mean_ms(before, after, models.ensembles),
        detections_buckets=bucket_delta(DETECTIONS_METRIC),
        score_buckets=bucket_delta(SCORE_METRIC),
        detections_sum=delta(f"{DETECTIONS_METRIC}_sum", nms),
        detections_count=delta(f"{DETECTIONS_METRIC}_count", nms),
    )


def _mean_ms(before: Scrape, after: Scrape, ensembles: tuple[str, ...]) -> float | None:
    """Triton's mean request time over the window, from its cumulative counters as exported (a rollout's
    ``probe`` samples, which take its own requests out of the counts, are left out: the duration includes them)."""
    exported = {key: value for key, value in after.items() if "probe" not in dict(key[1])}
    requests = sum(_total(exported, name, ensembles) - _total(before, name, ensembles) for name in (SUCCESS, FAILURE))
    duration = _total(exported, DURATION, ensembles) - _total(before, DURATION, ensembles)
    return round(duration / requests / 1000.0, 3) if requests > 0 else None
