"""Paired rounds: the raw detector and the ensemble measured minutes apart are not comparable here.

On a shared machine the detector's own speed drifts by 15-20 % within minutes, more than the ensemble's
cost. So the headline ratios come from short alternating windows -- raw detector in-process, ensemble
through Triton, raw, ensemble... -- each ratio taken within one round, and the spread over rounds shows
how far to trust it.

Raw throughput is measured for three session topologies at batch 1, each session driven by its own
thread (ONNX Runtime releases the GIL): the repository's own (``instances`` sessions x its thread setting,
spinning off as served: what the ensemble can at best deliver), one session as ONNX Runtime's defaults make it
(a thread per core this process may use, spinning: the latency reference), and one single-threaded session per core (often the
CPU's best throughput). The ensemble is compared with both the same topology (what the pipeline costs)
and the best of all three (what is left on the table).

Each round also times the preprocess work of one frame in this process (decode and letterbox, one OpenCV
thread as the preprocess step runs). A lone request cannot be faster than that plus the raw detector, so the
single-stream ratio is the ensemble's p50 at concurrency 1 over the lone raw session's p50 plus that decode
time; the throughput ratio at the paired concurrency is over the same session's images/s. The lone raw session
is the faster of the sessions that run alone: ONNX Runtime's default topology, and one session of every core with spinning
off (the served one when the repository serves that, else an extra topology, ``alone``). Spinning workers lose most of their time slices on a machine
that other jobs keep busy (measured here at a load of 10: 160-210 ms against 45 ms with spinning off).
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .closed_loop import Infer, client_factory, closed_loop
from .detector import ServedDetector, served_detector
from .errors import LoadTestError
from .images import synthetic_images
from .metrics import snapshot, stage_deltas
from .target import Endpoints

logger = logging.getLogger(__name__)
SUMMARY_KEYS = ("ratio_same_topology", "ratio_best_raw", "added_p50_c1_ms", "added_in_triton_c1_ms",
                "decode_p50_ms", "c1_vs_raw_plus_decode", "rps_vs_raw_single")


@dataclass(frozen=True)
class PairedSettings:
    model: str = "yolo"
    protocol: str = "grpc"
    size: tuple[int, int] = (1280, 720)
    concurrency: int = 4  # ensemble throughput side: enough in flight to keep every step busy
    rounds: int = 5
    window_s: float = 6.0
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.protocol not in ("grpc", "http"):
            raise LoadTestError(f"paired rounds take grpc or http, got {self.protocol!r}")


def _drive(runners: list[Any], tensor: Any, window_s: float) -> tuple[float, float]:
    """Each runner on its own thread, batch 1, back to back; returns (images/s, p50 ms)."""
    latencies: list[float] = []
    lock = threading.Lock()
    end = time.perf_counter() + window_s

    def loop(runner: Any) -> None:
        while time.perf_counter() < end:
            start = time.perf_counter()
            runner.run(tensor)
            with lock:
                latencies.append((time.perf_counter() - start) * 1000.0)

    begin = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(r,), daemon=True) for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.perf_counter() - begin), statistics.median(latencies)


def _decode_p50_ms(images: list[bytes], detector: ServedDetector, window_s: float) -> float:
    """Decode and letterbox one frame at a time, as the preprocess step does, for ``window_s``: the p50 in ms."""
    import cv2

    from generator.serving.batch import prepare_batch

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # the preprocess model's setting
    times: list[float] = []
    try:
        end = time.perf_counter() + window_s
        while time.perf_counter() < end or not times:
            start = time.perf_counter()
            prepare_batch([images[len(times) % len(images)]], detector.image_size,
                          reduced_decode=detector.reduced_decode)
            times.append((time.perf_counter() - start) * 1000.0)
    finally:
        cv2.setNumThreads(threads)
    return statistics.median(times)


def lone_reference(raw: dict[str, tuple[float, float]], sessions: dict[str, int]) -> str:
    """The raw topology a lone request is held to: the lowest p50 among those of one session."""
    alone = [name for name in ("single", "served", "alone") if sessions.get(name) == 1]
    return min(alone, key=lambda name: raw[name][1])


def _single_stream(p50_c1: float | None, raw_p50: float, decode_ms: float) -> float | None:
    """The ensemble's lone-request p50 over the floor: the raw detector plus the decode of the frame."""
    return round(p50_c1 / (raw_p50 + decode_ms), 3) if p50_c1 is not None else None


def _topologies(detector: ServedDetector, tensor: Any) -> dict[str, list[Any]]:
    """The three raw topologies, each session run twice (allocation and kernel choice happen then)."""
    from generator.serving.runner import OnnxRunner

    def sessions(count: int, threads: int, spin: bool = False) -> list[Any]:
        made = [OnnxRunner(str(detector.onnx.path), intra_op_threads=threads, spin_wait=spin) for _ in range(count)]
        for runner in made:
            runner.run(tensor)
            runner.run(tensor)
        return made

    cores = len(os.sched_getaffinity(0))
    made = {
        "served": sessions(detector.instances, detector.intra_op_threads),  # spinning off, as served
        "single": sessions(1, cores, spin=True),  # ONNX Runtime's defaults: every core (of the mask), spinning
        "per_core": sessions(cores, 1),
    }
    if (detector.instances, detector.intra_op_threads) != (1, cores):
        made["alone"] = sessions(1, cores)  # every core, spinning off: what a lone request can get here
    return made


def _median_range(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def _in_triton_ms(stages: dict[str, Any], model: str) -> float | None:
    """The ensemble's request time minus the detector's compute: decode, letterbox, NMS, hand-offs, queues."""
    ensemble, detector = stages.get(model), stages.get(f"{model}_detector")
    if ensemble and detector and ensemble.request_us and detector.compute_infer_us:
        return round((ensemble.request_us - detector.compute_infer_us) / 1000.0, 1)
    return None


def _round(endpoints: Endpoints, settings: PairedSettings, topologies: dict[str, list[Any]],
           detector: ServedDetector, make: Callable[[], Infer], images: list[bytes]) -> dict[str, Any]:
    """One round, back to back: every raw topology, the decode, the ensemble under load, then the ensemble alone."""
    load_before = os.getloadavg()[0]
    tensor = detector.prepared[:1]
    raw = {name: _drive(runners, tensor, settings.window_s) for name, runners in topologies.items()}
    decode_ms = _decode_p50_ms(images, detector, min(2.0, settings.window_s))
    lone = lone_reference(raw, {name: len(runners) for name, runners in topologies.items()})
    busy = closed_loop(make, images, settings.concurrency, settings.window_s, 1)
    before = snapshot(endpoints.metrics)
    single = closed_loop(make, images, 1, settings.window_s, 1)
    stages = stage_deltas(before, snapshot(endpoints.metrics))
    ensemble_rps = round(len(busy.latencies_ms) / busy.elapsed_s, 2)
    p50_c1 = round(statistics.median(single.latencies_ms), 1) if single.latencies_ms else None
    published = {name: {"images_per_s": round(ips, 2), "p50_ms": round(p50, 1)} for name, (ips, p50) in raw.items()}
    decode_ms = round(decode_ms, 2)
    return {
        "raw": published,
        "ensemble_rps": ensemble_rps,
        "ensemble_p50_c1_ms": p50_c1,
        "failures": busy.failures + single.failures,
        # Every ratio from the published (rounded) numbers, so a reader recomputing it from the record gets it exactly.
        "ratio_same_topology": round(ensemble_rps / published["served"]["images_per_s"], 3),
        "ratio_best_raw": round(ensemble_rps / max(v["images_per_s"] for v in published.values()), 3),
        "added_p50_c1_ms": round(p50_c1 - published["single"]["p50_ms"], 1) if p50_c1 is not None else None,
        "added_in_triton_c1_ms": _in_triton_ms(stages, settings.model),
        "decode_p50_ms": decode_ms,
        "lone_raw": lone,
        "c1_vs_raw_plus_decode": _single_stream(p50_c1, published[lone]["p50_ms"], decode_ms),
        "rps_vs_raw_single": round(ensemble_rps / published[lone]["images_per_s"], 3),
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],  # at the start and the end
    }


def _log_round(index: int, r: dict[str, Any]) -> None:
    raw = r["raw"]
    logger.info("  round %d: ensemble %s rps vs raw served %s / best %s img/s (x%s / x%s); c=1 p50 %s vs raw %s + "
                "decode %s ms (x%s; added %s, in Triton %s); load %s", index, r["ensemble_rps"],
                raw["served"]["images_per_s"], max(v["images_per_s"] for v in raw.values()),
                r["ratio_same_topology"], r["ratio_best_raw"], r["ensemble_p50_c1_ms"], raw[r["lone_raw"]]["p50_ms"],
                r["decode_p50_ms"], r["c1_vs_raw_plus_decode"], r["added_p50_c1_ms"], r["added_in_triton_c1_ms"],
                r["loadavg_1m"])


def paired_rounds(endpoints: Endpoints, repository: Path, settings: PairedSettings) -> dict[str, Any]:
    """Alternate raw-detector and ensemble windows; per-round ratios and their median and spread."""
    images = synthetic_images([settings.size], per_size=4)
    detector = served_detector(repository, settings.model, images)
    if isinstance(detector, str):
        return {"skipped": detector}
    logger.info("(d) paired rounds: raw detector and ensemble alternating (%d rounds) ...", settings.rounds)
    tensor = detector.prepared[:1]
    topologies = _topologies(detector, tensor)
    url = endpoints.grpc if settings.protocol == "grpc" else endpoints.http
    make = client_factory(settings.protocol, url, settings.model, settings.timeout_s)
    rounds = []
    for index in range(1, settings.rounds + 1):
        rounds.append(_round(endpoints, settings, topologies, detector, make, images))
        _log_round(index, rounds[-1])
    return {
        "settings": {**asdict(settings), "size": list(settings.size)},
        "detector": {"onnx": detector.onnx.record(), "baseline": detector.baseline,
                     "instances": detector.instances, "intra_op_threads": detector.intra_op_threads,
                     "per_core_sessions": len(topologies["per_core"])},
        "rounds": rounds,
        "summary": {key: _median_range(values) for key in SUMMARY_KEYS
                    if (values := [r[key] for r in rounds if r[key] is not None])},
    }

