"""Soak: steady traffic with bad images mixed in, while the server's memory, files and shared memory are sampled.

A leak shows as growth that does not level off: every few seconds the soak samples the RSS and open file
descriptors of ``tritonserver`` and of each Python-backend stub, and the ``/dev/shm`` region of each stub
(``resources.py``); at the end it fits the growth per hour after a warm-up (``growth.py``) and fails above
the limits (Triton's own QA fails long runs that grow more than 100 MB). Every good image must succeed and
every bad one must fail with its own message, all the way through.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .closed_loop import Infer, client_factory
from .errors import LoadTestError, RunError
from .hostile import BadImage
from .resources import ProcessSample, ServerProcesses

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SoakSettings:
    duration_s: float
    model: str = "yolo"
    protocol: str = "grpc"
    concurrency: int = 2
    rate_rps: float = 10.0  # all clients together; 0: back to back
    bad_every: int = 10  # every N-th request carries a bad image; 0: none
    sample_interval_s: float = 5.0
    warmup_s: float = 300.0
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.sample_interval_s <= 0 or self.concurrency < 1:
            raise LoadTestError("--duration, --sample-interval and --concurrency must be positive")
        if self.rate_rps < 0 or self.bad_every < 0 or self.warmup_s < 0:
            raise LoadTestError("--rate, --bad-every and --warmup cannot be negative")
        if self.warmup_s >= self.duration_s:
            raise LoadTestError(f"the warm-up ({self.warmup_s:g} s) must end before the run does "
                                f"({self.duration_s:g} s): shorten --warmup")


@dataclass
class Traffic:
    """What the clients saw, counted across threads."""

    good_ok: int = 0
    good_failed: int = 0
    bad_wrong: int = 0  # bad images accepted, or refused without their own message
    bad_sent: Counter[str] = field(default_factory=Counter)
    bad_rejected: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)  # first few: good failures, bad accepted or mis-worded
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def good(self, error: Exception | None) -> None:
        with self._lock:
            if error is None:
                self.good_ok += 1
                return
            self.good_failed += 1
            self._note(f"a good image failed: {error}")

    def bad(self, image: BadImage, error: Exception | None) -> None:
        with self._lock:
            self.bad_sent[image.kind] += 1
            if error is not None and image.expected in str(error):
                self.bad_rejected[image.kind] += 1
                return
            self.bad_wrong += 1
            if error is None:
                self._note(f"{image.kind} was accepted; expected a refusal mentioning {image.expected!r}")
            else:
                self._note(f"{image.kind} failed without {image.expected!r}: {error}")

    def _note(self, text: str) -> None:
        if len(self.unexpected) < 10 and text not in self.unexpected:
            self.unexpected.append(text)

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"good": {"ok": self.good_ok, "failed": self.good_failed},
                    "bad": {kind: {"sent": sent, "rejected": self.bad_rejected[kind]}
                            for kind, sent in sorted(self.bad_sent.items())},
                    "bad_not_refused_as_expected": self.bad_wrong,
                    "unexpected": list(self.unexpected)}


def request_plan(good: list[bytes], bad: list[BadImage], bad_every: int) -> Iterator[bytes | BadImage]:
    """The request sequence: good images in turn, every ``bad_every``-th replaced by the next bad image."""
    bad_cycle = itertools.cycle(bad) if bad and bad_every else None
    for index, image in enumerate(itertools.cycle(good), start=1):
        yield next(bad_cycle) if bad_cycle is not None and index % bad_every == 0 else image


def _send(infer: Infer, item: bytes | BadImage, traffic: Traffic) -> None:
    data = item.data if isinstance(item, BadImage) else item
    error: Exception | None = None
    try:
        infer(data)
    except Exception as exc:  # noqa: BLE001 -- every outcome is checked against what was sent
        error = exc
    if isinstance(item, BadImage):
        traffic.bad(item, error)
    else:
        traffic.good(error)


def drive(make_client: Callable[[], Infer], plan: Iterator[bytes | BadImage], settings: SoakSettings,
          traffic: Traffic, stop: threading.Event) -> list[threading.Thread]:
    """Start the client threads; each keeps its share of ``rate_rps`` (a missed slot is dropped, not caught up)."""
    plan_lock = threading.Lock()
    interval = settings.concurrency / settings.rate_rps if settings.rate_rps else 0.0

    def worker(offset: float) -> None:
        infer = make_client()
        next_at = time.monotonic() + offset
        while not stop.is_set():
            if interval:
                stop.wait(max(0.0, next_at - time.monotonic()))
                next_at = max(next_at + interval, time.monotonic())
                if stop.is_set():
                    return
            with plan_lock:
                item = next(plan)
            _send(infer, item, traffic)

    threads = [threading.Thread(target=worker, args=(n * interval / settings.concurrency,), daemon=True,
                                name=f"soak-client-{n}") for n in range(settings.concurrency)]
    for thread in threads:
        thread.start()
    return threads


@dataclass(frozen=True)
class Sample:
    t_s: float
    processes: tuple[ProcessSample, ...]
    good_ok: int  # requests that had succeeded by then


def sample_until(processes: ServerProcesses, settings: SoakSettings, traffic: Traffic,
                 stop: threading.Event) -> tuple[list[Sample], str | None]:
    """Sample every ``sample_interval_s`` until the duration is over; (samples, why it stopped early)."""
    samples: list[Sample] = []
    begin = time.monotonic()
    for tick in itertools.count():
        due = begin + tick * settings.sample_interval_s
        if due > begin + settings.duration_s or stop.wait(max(0.0, due - time.monotonic())):
            return samples, None
        try:
            current = tuple(processes.sample())
        except RunError as exc:
            return samples, str(exc)
        samples.append(Sample(round(time.monotonic() - begin, 2), current, traffic.good_ok))
        if tick % max(1, round(60 / settings.sample_interval_s)) == 0:
            total = sum(p.rss_bytes for p in current) / 2**20
            logger.info("  %4.0f s: RSS %.0f MB in %d processes, %d good requests served", samples[-1].t_s, total,
                        len(current), traffic.good_ok)
    return samples, None


def run_soak(url: str, server_pid: int, settings: SoakSettings, good: list[bytes],
             bad: list[BadImage]) -> tuple[list[Sample], Traffic, ServerProcesses, str | None]:
    """Drive traffic and sample the server for ``duration_s``; (samples, traffic, processes, early stop reason)."""
    processes = ServerProcesses(server_pid)
    traffic, stop = Traffic(), threading.Event()
    make = client_factory(settings.protocol, url, settings.model, settings.timeout_s)
    try:
        make()(good[0])  # a good image is served before the clock starts, or the soak says why not
    except Exception as exc:  # any failure here means there is nothing to soak
        raise LoadTestError(f"{settings.model} at {url} did not serve a good image: {exc}") from exc
    logger.info("soak: %s for %.0f s, %d clients at %s req/s, every %s-th image bad, samples every %g s",
                settings.model, settings.duration_s, settings.concurrency, settings.rate_rps or "max",
                settings.bad_every or "no", settings.sample_interval_s)
    threads = drive(make, request_plan(good, bad, settings.bad_every), settings, traffic, stop)
    try:
        samples, stopped = sample_until(processes, settings, traffic, stop)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=settings.timeout_s + 5)
    return samples, traffic, processes, stopped
