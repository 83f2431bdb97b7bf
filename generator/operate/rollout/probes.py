"""The rollout's own timed requests: the control images sent to both sides in pairs through the window.

Triton's latency summaries cannot compare two sides over one window (each reaches back its own 60 s, and the
canary's covers only its short life), and its cumulative duration counters give a mean, with no spread to judge
it by. So the rollout measures latency itself: every ``interval_s`` it sends one control image to the reference
side and the same image to the judged side, back to back, the order alternating pair by pair. Both requests of a
pair meet the same load on the machine at the same moment, so their difference is the versions' difference, and
the pairs are a sample the latency check can bound (decision.py). The pairs' detections are the control images'
answers the agreement check compares, and what the probes added to Triton's counters is taken out of the window
again (``offsets``), so that the traffic checks judge the users' requests alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from clients.errors import ClientError
from generator.operate.rollout.agreement import Detections
from generator.operate.rollout.window import SUCCESS, Scrape
from generator.serving.telemetry import output_counts

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pair:
    """One control image through both sides: each side's milliseconds and detections."""

    image: int
    reference_ms: float
    judged_ms: float
    reference: Detections
    judged: Detections


class Prober:
    """Sends the pairs from a thread while the window runs; ``paused`` holds it still while the window is read."""

    def __init__(self, url: str, models: tuple[str, str], images: Sequence[bytes], interval_s: float,
                 timeout_s: float = 30.0) -> None:
        self.url, self.models, self.images, self.interval_s = url, models, tuple(images), interval_s
        self.timeout_s = timeout_s
        self.pairs: list[Pair] = []
        self.error: Exception | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollout-probes", daemon=True)
        self._local = threading.local()  # the HTTP client is gevent-based: one client per thread

    def __enter__(self) -> Prober:
        if self.images:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s * 2 + 1)
        self._close()  # the clients the caller's thread made in ``paused``

    def _clients(self) -> list[Any]:
        if not hasattr(self._local, "clients"):
            from clients import NO_RETRY, DetectionClient

            # No retries: a failed probe is evidence about its side, not something to hide.
            self._local.clients = [DetectionClient(self.url, model=m, timeout_s=self.timeout_s, retry=NO_RETRY)
                                   for m in self.models]
        return list(self._local.clients)

    def _close(self) -> None:
        for client in getattr(self._local, "clients", []):
            client.close()
        self._local.clients = []

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                begun = time.monotonic()
                with self._lock:
                    self._pair(len(self.pairs))
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - begun)))
        except ClientError as exc:  # a side that fails its probe: the window ends (workflow ends it safe)
            logger.warning("a rollout probe failed: %s", exc)
            self.error = exc
        finally:
            self._close()

    def _pair(self, number: int) -> None:
        image = number % len(self.images)
        order = (0, 1) if number % 2 == 0 else (1, 0)  # who goes first alternates: no side always warmer
        timed: dict[int, tuple[float, Detections]] = {}
        clients = self._clients()
        for side in order:
            started = time.perf_counter()
            found = clients[side].detect(self.images[image])
            timed[side] = ((time.perf_counter() - started) * 1000.0, (found.boxes, found.scores, found.class_ids))
        self.pairs.append(Pair(image, timed[0][0], timed[1][0], timed[0][1], timed[1][1]))

    @contextmanager
    def paused(self) -> Iterator[list[Pair]]:
        """No pair in flight while the caller reads the window; every control image answered at least once
        (the ones the thread has not reached yet are sent now). Yields the pairs so far."""
        with self._lock:
            if self.error is not None:
                raise self.error
            covered = {p.image for p in self.pairs}
            for image in range(len(self.images)):
                if image not in covered:
                    self._pair(image)
            yield list(self.pairs)


def latest_answers(pairs: Sequence[Pair], images: int) -> tuple[list[Detections], list[Detections]]:
    """Each control image's latest answer from each side, in image order (what agreement compares)."""
    last = {p.image: p for p in pairs}
    return [last[i].reference for i in range(images)], [last[i].judged for i in range(images)]


def offsets(answers: Sequence[Detections], ensemble: str, nms: str, max_detections: int) -> Scrape:
    """What ``answers`` (one side's probes) added to Triton's counters, negated: added to a scrape, the window
    holds the users' requests alone. Keyed with a ``probe`` label so no real sample is replaced."""
    out: Scrape = {(SUCCESS, (("model", ensemble), ("probe", "1"))): -float(len(answers))}
    for _, scores, _ in answers:
        counts = output_counts(np.asarray([len(scores)]), np.asarray(scores, np.float32).reshape(1, -1),
                               max_detections)
        for (name, labels), value in counts.items():
            key = (name.removesuffix("_total"), tuple(sorted((*labels, ("model", nms), ("probe", "1")))))
            out[key] = out.get(key, 0.0) - value
    return out


def subtract(scrape: Scrape, *removed: Scrape) -> Scrape:
    """``scrape`` with the (negative) samples of ``removed`` added beside its own."""
    merged = dict(scrape)
    for extra in removed:
        for key, value in extra.items():
            merged[key] = merged.get(key, 0.0) + value
    return merged
