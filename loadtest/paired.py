"""Paired rounds: the raw detector and the ensemble measured minutes apart are not comparable here.

On a shared machine the detector's own speed drifts by 15-20 % within minutes, more than the ensemble's
cost. So the headline ratios come from short alternating windows -- raw detector in-process, ensemble
through Triton, raw, ensemble... -- each ratio taken within one round, and the spread over rounds shows
how far to trust it.

Raw throughput is measured for three session topologies at batch 1, each session driven by its own
thread (ONNX Runtime releases the GIL): the repository's own (``instances`` sessions x its thread setting,
spinning off as served: what the ensemble can at best deliver), one session with ONNX Runtime's defaults
(spinning worker threads: the latency reference), and one single-threaded session per core (often the
CPU's best throughput). The ensemble is compared with both the same topology
(what the pipeline costs) and the best of all three (what is left on the table).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .bench import ServedDetector, client_factory, closed_loop, served_detector
from .errors import LoadTestError
from .images import synthetic_images
from .metrics import snapshot, stage_deltas


@dataclass(frozen=True)
class PairedSettings:
    model: str = "yolo"
    protocol: str = "grpc"
    size: tuple[int, int] = (1280, 720)
    concurrency: int = 4  # ensemble throughput side: enough in flight to keep every step busy
    rounds: int = 5
    window_s: float = 6.0
    timeout_s: float = 60.0


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


def _topologies(detector: ServedDetector) -> dict[str, list[Any]]:
    from generator.serving.runner import OnnxRunner

    def sessions(count: int, threads: int, spin: bool = False) -> list[Any]:
        return [OnnxRunner(str(detector.onnx), intra_op_threads=threads, spin_wait=spin) for _ in range(count)]

    cores = len(os.sched_getaffinity(0))
    return {
        "served": sessions(detector.instances, detector.intra_op_threads),  # spinning off, as served
        "single": sessions(1, 0, spin=True),  # ONNX Runtime's defaults: every core, spinning
        "per_core": sessions(cores, 1),
    }


def _median_range(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def paired_rounds(grpc_url: str, http_url: str, metrics_url: str, repository: Path, settings: PairedSettings,
                  progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Alternate raw-detector and ensemble windows; per-round ratios and their median and spread."""
    images = synthetic_images([settings.size], per_size=4)
    detector = served_detector(repository, settings.model, images)
    if isinstance(detector, str):
        return {"skipped": detector}
    if settings.protocol not in ("grpc", "http"):
        raise LoadTestError(f"paired rounds take grpc or http, got {settings.protocol!r}")
    tensor = detector.prepared[:1]
    topologies = _topologies(detector)
    for runners in topologies.values():
        for runner in runners:
            runner.run(tensor)  # allocation and kernel choice happen on the first runs
            runner.run(tensor)
    make = client_factory(settings.protocol, grpc_url if settings.protocol == "grpc" else http_url,
                          settings.model, settings.timeout_s)

    rounds: list[dict[str, Any]] = []
    for index in range(settings.rounds):
        raw = {name: _drive(runners, tensor, settings.window_s) for name, runners in topologies.items()}
        busy, failures, elapsed, _ = closed_loop(make, images, settings.concurrency, settings.window_s, 1)
        before = snapshot(metrics_url)
        single, failures_c1, _, _ = closed_loop(make, images, 1, settings.window_s, 1)
        stages = stage_deltas(before, snapshot(metrics_url))
        ensemble_rps = len(busy) / elapsed
        best_raw = max(ips for ips, _ in raw.values())
        ensemble = stages.get(settings.model)
        detector_stage = stages.get(f"{settings.model}_detector")
        pipeline_ms = None
        if ensemble and detector_stage and ensemble.request_us and detector_stage.compute_infer_us:
            pipeline_ms = (ensemble.request_us - detector_stage.compute_infer_us) / 1000.0
        record: dict[str, Any] = {
            "raw": {name: {"images_per_s": round(ips, 2), "p50_ms": round(p50, 1)} for name, (ips, p50) in raw.items()},
            "ensemble_rps": round(ensemble_rps, 2),
            "ensemble_p50_c1_ms": round(statistics.median(single), 1) if single else None,
            "failures": failures + failures_c1,
            "ratio_same_topology": round(ensemble_rps / raw["served"][0], 3),
            "ratio_best_raw": round(ensemble_rps / best_raw, 3),
            "added_p50_c1_ms": round(statistics.median(single) - raw["single"][1], 1) if single else None,
            "added_in_triton_c1_ms": round(pipeline_ms, 1) if pipeline_ms is not None else None,
        }
        rounds.append(record)
        progress(f"  round {index + 1}: ensemble {record['ensemble_rps']} rps vs raw served "
                 f"{raw['served'][0]:.2f} / best {best_raw:.2f} img/s "
                 f"(x{record['ratio_same_topology']} / x{record['ratio_best_raw']}); c=1 p50 "
                 f"{record['ensemble_p50_c1_ms']} vs raw {raw['single'][1]:.1f} ms "
                 f"(added {record['added_p50_c1_ms']}, in Triton {record['added_in_triton_c1_ms']})")
    summary = {key: _median_range([r[key] for r in rounds if r[key] is not None])
               for key in ("ratio_same_topology", "ratio_best_raw", "added_p50_c1_ms", "added_in_triton_c1_ms")
               if any(r[key] is not None for r in rounds)}
    return {
        "settings": {**asdict(settings), "size": list(settings.size)},
        "detector": {"onnx": str(detector.onnx), "baseline": detector.baseline, "instances": detector.instances,
                     "intra_op_threads": detector.intra_op_threads,
                     "per_core_sessions": len(topologies["per_core"])},
        "rounds": rounds,
        "summary": summary,
    }


def paired_lines(paired: dict[str, Any]) -> list[str]:
    """Markdown: one row per round, then the medians and ranges."""
    if "rounds" not in paired:
        return [f"skipped: {paired.get('skipped')}"]
    s, d = paired["settings"], paired["detector"]
    lines = [
        f"{s['protocol']} {s['size'][0]}x{s['size'][1]} JPEG; {s['rounds']} rounds of {s['window_s']} s windows. "
        f"Raw detector: {d.get('baseline', 'served graph')}. Raw topologies at batch 1: "
        f"served = {d['instances']} session(s) x intra-op threads {d['intra_op_threads']} (spinning off: the "
        "served sessions under load), single = 1 session with ONNX Runtime's defaults (every core, spinning on: "
        "the latency reference), "
        f"per-core = {d['per_core_sessions']} x 1 thread. "
        f"Ensemble throughput at concurrency {s['concurrency']}, latency at concurrency 1.",
        "",
        "| round | raw served img/s | raw single img/s (p50 ms) | raw per-core img/s | ensemble rps | "
        "x same topology | x best raw | ensemble p50 c=1 ms | added p50 ms | added in Triton ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(paired["rounds"], 1):
        raw = r["raw"]
        lines.append(
            f"| {i} | {raw['served']['images_per_s']} | {raw['single']['images_per_s']} ({raw['single']['p50_ms']}) | "
            f"{raw['per_core']['images_per_s']} | {r['ensemble_rps']} | {r['ratio_same_topology']} | "
            f"{r['ratio_best_raw']} | {r['ensemble_p50_c1_ms']} | {r['added_p50_c1_ms']} | {r['added_in_triton_c1_ms']} |"
        )
    lines.append("")
    for key, label in (("ratio_same_topology", "throughput vs raw, same topology"),
                       ("ratio_best_raw", "throughput vs best raw topology"),
                       ("added_p50_c1_ms", "added p50 at concurrency 1 (client, ms)"),
                       ("added_in_triton_c1_ms", "added in Triton at concurrency 1 (ensemble minus detector compute, ms)")):
        if key in paired["summary"]:
            v = paired["summary"][key]
            lines.append(f"- {label}: median **{v['median']}** (range {v['min']} - {v['max']})")
    return lines
