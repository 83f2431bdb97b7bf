"""The benchmark harness: one run, one machine, several views of where a request's time goes.

(a) the raw detector in-process on already-letterboxed tensors (``detector.py``): the ceiling; (b) the whole
ensemble through Triton over gRPC and HTTP, closed-loop at several concurrencies and image sizes; (c)
per-stage costs from Triton's metrics for every cell of (b); (d) paired rounds (``paired.py``) for the
headline ratios; and a cross-check that runs Locust and perf_analyzer at one concurrency.

Results record the model by name and sha256, never by a path of the machine that ran them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from generator.serving.contract import STEPS, step_model_name

from .closed_loop import client_factory, closed_loop
from .crosscheck import crosscheck
from .detector import raw_detector
from .energy import EnergyMeter, energy_record
from .images import synthetic_images
from .machine import machine_info
from .metrics import phase_deltas, published_phases, settled_deltas, snapshot
from .paired import PairedSettings, paired_rounds
from .provenance import repository_record, triton_version
from .report import LatencyPoint, point_from_latencies
from .target import Endpoints

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchSettings:
    model: str = "yolo"
    protocols: tuple[str, ...] = ("grpc", "http")
    sizes: tuple[tuple[int, int], ...] = ((640, 480), (1280, 720))
    concurrency: tuple[int, ...] = (1, 2, 4)
    duration_s: float = 10.0
    warmup_requests: int = 2
    images_per_size: int = 4
    raw_iterations: int = 20
    raw_batches: tuple[int, ...] = (1, 4)
    timeout_s: float = 60.0
    crosscheck_concurrency: int | None = 2
    crosscheck_duration_s: float = 20.0


def _cell(endpoints: Endpoints, settings: BenchSettings, protocol: str, size: tuple[int, int],
          images: list[bytes], concurrency: int, energy: EnergyMeter | None = None) -> dict[str, Any]:
    """One closed-loop window and the per-model deltas of Triton's counters (and the GPUs' energy, where NVML
    answers) over exactly that window."""
    url = endpoints.grpc if protocol == "grpc" else endpoints.http
    before: dict[str, Any] = {}
    models = (settings.model, *(step_model_name(settings.model, s) for s in STEPS))

    def scrape_start() -> None:
        before["phases"] = published_phases(endpoints.metrics, models)  # after the warm-up requests
        before["snapshot"] = snapshot(endpoints.metrics)
        before["energy"] = energy.read() if energy else None

    loop = closed_loop(client_factory(protocol, url, settings.model, settings.timeout_s), images, concurrency,
                       settings.duration_s, settings.warmup_requests, scrape_start)
    stages = settled_deltas(endpoints.metrics, before["snapshot"], models, len(loop.latencies_ms))
    phases = phase_deltas(before["phases"], published_phases(endpoints.metrics, models))
    gpu_energy = energy_record(before["energy"], energy.read() if energy else None, len(loop.latencies_ms),
                               loop.elapsed_s)
    label = f"{protocol} {size[0]}x{size[1]}"
    point = point_from_latencies("bench", concurrency, loop.latencies_ms, loop.failures, loop.elapsed_s, label)
    logger.info("  %s c=%d: %d req, %.2f rps, p50 %s ms, p95 %s ms, failures %d%s", label, concurrency,
                point.requests, point.throughput_rps, point.p50_ms, point.p95_ms, loop.failures,
                f", {gpu_energy['joules_per_image']} J/image" if gpu_energy else "")
    cell = {"protocol": protocol, "size": list(size), "concurrency": concurrency,
            "avg_image_bytes": round(sum(map(len, images)) / len(images)), "point": point.to_dict(),
            "errors": loop.errors, "stages": {name: s.to_dict() for name, s in stages.items()}, "phases": phases}
    if gpu_energy is not None:
        cell["gpu_energy"] = gpu_energy
    return cell


def ensemble_cells(endpoints: Endpoints, settings: BenchSettings) -> list[dict[str, Any]]:
    """Every protocol x size x concurrency cell: client latencies and Triton's per-stage deltas."""
    logger.info("(b) ensemble, closed loop ...")
    energy = EnergyMeter()
    if not energy.available:
        logger.info("no energy per image: %s", energy.unavailable)
    cells: list[dict[str, Any]] = []
    for size in settings.sizes:
        images = synthetic_images([size], per_size=settings.images_per_size)
        for protocol in settings.protocols:
            for concurrency in settings.concurrency:
                cells.append(_cell(endpoints, settings, protocol, size, images, concurrency,
                                   energy if energy.available else None))
    return cells


def point_of(cell: dict[str, Any]) -> LatencyPoint:
    data = {k: v for k, v in cell["point"].items() if k != "fail_ratio"}
    return LatencyPoint(**data)


def _crosscheck(endpoints: Endpoints, settings: BenchSettings, cells: list[dict[str, Any]],
                work: Path) -> dict[str, Any]:
    concurrency = settings.crosscheck_concurrency or 1
    logger.info("cross-check: Locust and perf_analyzer at concurrency %d ...", concurrency)
    same = [c for c in cells if c["protocol"] == "grpc" and c["size"] == list(settings.sizes[0])
            and c["concurrency"] == concurrency]
    rate = same[0]["point"]["throughput_rps"] if same else 2.0
    result = crosscheck(endpoints.grpc, endpoints.metrics, settings.model, settings.sizes[0], settings.images_per_size,
                        concurrency, settings.crosscheck_duration_s, work / "crosscheck",
                        request_count=max(10, round(rate * settings.crosscheck_duration_s)))
    for tool in ("locust", "perf_analyzer"):  # a tool's error names its log in the temporary work folder
        if "error" in result.get(tool, {}):
            result[tool]["error"] = result[tool]["error"].replace(str(work), "<work>")
    return result


def run_bench(endpoints: Endpoints, mode: str, repository: Path | None, settings: BenchSettings,
              paired: PairedSettings | None, work: Path) -> dict[str, Any]:
    """Measure (a)-(d) and the cross-check against a ready server; the results as one JSON-ready dict."""
    started = datetime.now(timezone.utc)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"), "machine": machine_info(),
        "settings": asdict(settings),
        "server": {"mode": mode, "triton_version": triton_version(endpoints.http), "endpoints": asdict(endpoints),
                   "repository": repository_record(repository)},
    }
    if repository is not None:
        results["raw_detector"] = raw_detector(repository, settings.model,
                                               synthetic_images([settings.sizes[0]], per_size=4),
                                               settings.raw_iterations, settings.raw_batches)
    else:
        results["raw_detector"] = {"skipped": "no --repository to take the detector ONNX from"}
    results["ensemble"] = ensemble_cells(endpoints, settings)
    if paired is not None and repository is not None:
        results["paired"] = paired_rounds(endpoints, repository, paired)
    if settings.crosscheck_concurrency:
        results["crosscheck"] = _crosscheck(endpoints, settings, results["ensemble"], work)
    results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    results["machine"]["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    return results
