"""Run Locust and perf_analyzer at one concurrency on the same images, to compare them with the bench loop.

The three tools measure the same closed loop in different ways (gevent users, C++ threads, Python threads);
their p50s side by side show how much of a number is the tool rather than the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import LoadTestError
from .images import synthetic_images
from .locust_run import LocustRun
from .locust_run import execute as run_locust
from .perf_analyzer import PerfAnalyzerRun, locate_binary
from .perf_analyzer import execute as run_perf_analyzer
from .perf_inputs import write_input_data
from .report import LatencyPoint


def crosscheck(grpc_url: str, metrics_url: str, model: str, size: tuple[int, int], images_per_size: int,
               concurrency: int, duration_s: float, out: Path, request_count: int = 30) -> dict[str, Any]:
    """Locust and perf_analyzer over gRPC at ``concurrency``; a tool that cannot run is reported, not fatal.

    perf_analyzer measures a fixed ``request_count`` (its stability windows rarely settle on a shared CPU);
    pick about what the other tools complete in ``duration_s``.
    """
    result: dict[str, Any] = {"concurrency": concurrency, "size": list(size), "protocol": "grpc"}
    sizes = f"{size[0]}x{size[1]}"
    try:
        summary, _ = run_locust(LocustRun(
            url=grpc_url, protocol="grpc", model=model, users=concurrency, spawn_rate=max(concurrency, 1),
            duration_s=duration_s, out=out / "locust", sizes=sizes, images_per_size=images_per_size,
            metrics_url=metrics_url,
        ))
        result["locust"] = {"point": summary["client"], "health": summary["health"]}
    except LoadTestError as exc:
        result["locust"] = {"error": str(exc)}
    try:
        binary = locate_binary()
        images = synthetic_images([size], per_size=images_per_size)
        run = PerfAnalyzerRun(
            url=grpc_url, protocol="grpc", model=model,
            input_data=write_input_data(images, out / "perf_analyzer" / "input_data.json"),
            csv_path=out / "perf_analyzer" / "perf_analyzer.csv", concurrency=(concurrency, concurrency, 1),
            request_count=max(request_count, concurrency * 4),
        )
        points, breakdown = run_perf_analyzer(binary, run, out / "perf_analyzer" / "perf_analyzer.log")
        result["perf_analyzer"] = {"point": points[0].to_dict(), "server_breakdown_us": breakdown[concurrency]}
    except LoadTestError as exc:
        result["perf_analyzer"] = {"error": str(exc)}
    return result


def crosscheck_points(result: dict[str, Any]) -> list[list[LatencyPoint]]:
    """The tools that produced a number, as point lists for ``report.compare_p50``."""
    sets: list[list[LatencyPoint]] = []
    for tool in ("locust", "perf_analyzer"):
        point = result.get(tool, {}).get("point")
        if point:
            data = {k: point[k] for k in LatencyPoint.__dataclass_fields__ if k in point}
            sets.append([LatencyPoint(**data)])
    return sets
