"""Drive NVIDIA's ``perf_analyzer`` with real images and read its CSV into the common result shape.

The project's tritonclient (2.73) is a pure-Python wheel without the binary; the 2.51 wheel carries it. So
perf_analyzer runs from an environment of its own, made on first use from
``generator/server/locks/perf-analyzer.txt`` under the server cache (generator/server/environments.py):
tritonclient 2.51 and ``nvidia-cuda-runtime-cu12``, whose ``libcudart.so.12`` the binary links even
without a GPU. It also needs Debian's ``libb64-0d``. When a library is missing this module says exactly
which and how to install it, instead of letting the loader print a cryptic error.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from generator.cache import cache_root
from generator.errors import ServerError
from generator.server.environments import PERF_ANALYZER, ensure_environment

from .errors import LoadTestError, RunError, ToolMissingError
from .report import LatencyPoint

LIBRARY_HINTS = {
    "libb64.so.0d": "Debian package libb64-0d (apt-get install -y libb64-0d)",
    "libcudart.so.12": "PyPI package nvidia-cuda-runtime-cu12 (in the environment of the perf_analyzer binary; "
    "its lib folder is put on LD_LIBRARY_PATH automatically)",
}


def locate_binary(explicit: Path | None = None) -> Path:
    """The perf_analyzer to use: ``explicit``, else the one of its locked environment (made the first time)."""
    if explicit is not None:
        if not explicit.is_file():
            raise ToolMissingError(f"perf_analyzer not found at {explicit}")
        return explicit
    try:
        environment = ensure_environment(PERF_ANALYZER, cache_root())
    except ServerError as exc:
        raise ToolMissingError(f"perf_analyzer is not available: {exc}; or pass --binary PATH") from None
    binary = environment.bin / "perf_analyzer"
    if not binary.is_file():
        raise ToolMissingError(f"{binary} is missing from its environment ({PERF_ANALYZER.lock.name}); "
                               "pass --binary PATH")
    return binary


def cuda_runtime_dirs(binary: Path) -> list[str]:
    """Library folders of ``nvidia-cuda-runtime-cu12`` in the environment ``binary`` comes from, and in this one."""
    environment = binary.parent.parent
    found = [str(p) for p in sorted(environment.glob("lib/python*/site-packages/nvidia/cuda_runtime/lib"))]
    try:
        import nvidia.cuda_runtime as cuda_runtime
    except ImportError:
        return found
    return found + [str(Path(p) / "lib") for p in cuda_runtime.__path__ if (Path(p) / "lib").is_dir()]


def runtime_environment(binary: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*cuda_runtime_dirs(binary), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


def missing_libraries(binary: Path, env: dict[str, str]) -> list[str]:
    """Shared libraries the dynamic loader cannot find for ``binary`` (via ``ldd``)."""
    if shutil.which("ldd") is None:
        return []
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=env, check=False)
    return sorted({line.split("=>")[0].strip() for line in result.stdout.splitlines() if "not found" in line})


def check_runnable(binary: Path) -> dict[str, str]:
    """Return the environment to run ``binary`` in, or raise naming every missing library and its package."""
    env = runtime_environment(binary)
    missing = missing_libraries(binary, env)
    if missing:
        details = "; ".join(f"{lib}: install the {LIBRARY_HINTS.get(lib, 'package that provides it')}" for lib in missing)
        raise ToolMissingError(f"{binary} cannot run, missing shared libraries -- {details}")
    return env


@dataclass(frozen=True)
class PerfAnalyzerRun:
    url: str
    protocol: str
    model: str
    input_data: Path
    csv_path: Path
    concurrency: tuple[int, int, int] = (1, 4, 1)  # start, end, step
    measurement_interval_ms: int = 5000
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int = 95
    batch_size: int = 1
    request_count: int | None = None  # a fixed number of requests per level instead of stability windows
    timeout_hint_s: float = 5.0  # worst expected seconds per request, for the overall time limit
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        start, end, step = self.concurrency
        if start < 1 or end < start or step < 1:
            raise LoadTestError(f"bad concurrency range {start}:{end}:{step}: need 1 <= start <= end, step >= 1")


def parse_concurrency(text: str) -> tuple[int, int, int]:
    """``4`` -> (4, 4, 1); ``1:8`` -> (1, 8, 1); ``1:8:2`` -> (1, 8, 2)."""
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise LoadTestError(f"bad concurrency {text!r}: use N, START:END or START:END:STEP") from None
    if len(numbers) == 1:
        return numbers[0], numbers[0], 1
    if len(numbers) == 2:
        return numbers[0], numbers[1], 1
    if len(numbers) == 3:
        return numbers[0], numbers[1], numbers[2]
    raise LoadTestError(f"bad concurrency {text!r}: use N, START:END or START:END:STEP")


def command(binary: Path, run: PerfAnalyzerRun) -> list[str]:
    start, end, step = run.concurrency
    return [
        str(binary), "-m", run.model, "-u", run.url, "-i", run.protocol, "-b", str(run.batch_size),
        "--input-data", str(run.input_data),
        "--concurrency-range", f"{start}:{end}:{step}",
        "--measurement-interval", str(run.measurement_interval_ms),
        "-s", f"{run.stability_percentage:g}", "--max-trials", str(run.max_trials),
        f"--percentile={run.percentile}", "-f", str(run.csv_path),
        *(["--request-count", str(run.request_count)] if run.request_count else []),
        *run.extra_args,
    ]


_REQUEST_COUNT = re.compile(r"Request concurrency:\s*(\d+)\s*\n\s*Client:\s*\n\s*Request count:\s*(\d+)")
_LATENCY_PARTS = ("Client Send", "Network+Server Send/Recv", "Server Queue", "Server Compute Input",
                  "Server Compute Infer", "Server Compute Output", "Client Recv")


def parse_csv(path: Path, stdout: str = "") -> tuple[list[LatencyPoint], dict[int, dict[str, float]]]:
    """perf_analyzer's ``-f`` CSV -> points sorted by concurrency, plus its server-side breakdown (us).

    The CSV has no request count; it is taken from perf_analyzer's text output when given.
    """
    counts = {int(c): int(n) for c, n in _REQUEST_COUNT.findall(stdout)}
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or "Concurrency" not in rows[0]:
        raise RunError(f"{path} is not a perf_analyzer concurrency CSV")
    points: list[LatencyPoint] = []
    breakdown: dict[int, dict[str, float]] = {}
    for row in rows:
        concurrency = int(row["Concurrency"])

        def ms(column: str, r: dict[str, str] = row) -> float | None:
            return round(float(r[column]) / 1000.0, 2) if r.get(column) not in (None, "") else None

        avg_us = sum(float(row[c]) for c in _LATENCY_PARTS if row.get(c) not in (None, ""))
        points.append(
            LatencyPoint(
                tool="perf_analyzer", concurrency=concurrency, requests=counts.get(concurrency, 0), failures=0,
                throughput_rps=round(float(row["Inferences/Second"]), 3),
                p50_ms=ms("p50 latency"), p90_ms=ms("p90 latency"), p95_ms=ms("p95 latency"),
                p99_ms=ms("p99 latency"), avg_ms=round(avg_us / 1000.0, 2) if avg_us else None,
            )
        )
        breakdown[concurrency] = {c: float(row[c]) for c in _LATENCY_PARTS if row.get(c) not in (None, "")}
    points.sort(key=lambda p: p.concurrency)
    return points, dict(sorted(breakdown.items()))


def _run_once(binary: Path, run: PerfAnalyzerRun, env: dict[str, str], log_path: Path,
              limit: float) -> tuple[list[LatencyPoint], dict[int, dict[str, float]]]:
    run.csv_path.parent.mkdir(parents=True, exist_ok=True)
    run.csv_path.unlink(missing_ok=True)
    try:
        result = subprocess.run(command(binary, run), capture_output=True, text=True, env=env, timeout=limit,
                                check=False)
    except subprocess.TimeoutExpired as exc:
        raise RunError(f"perf_analyzer did not finish within {limit:.0f} s") from exc
    output = result.stdout + result.stderr
    with log_path.open("a") as log:
        log.write(output)
    if not run.csv_path.exists():
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.lower().startswith(("error", "failed"))), None)
        why = why or next((ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()), lines[-1] if lines else "")
        hint = ""
        if "stable" in why.lower():
            hint = (" (the machine is too noisy for these settings: raise --measurement-interval or "
                    "--stability-percentage, or measure a fixed --request-count)")
        raise RunError(f"perf_analyzer exited with code {result.returncode}: {why}{hint}; full output in {log_path}")
    return parse_csv(run.csv_path, result.stdout)


def execute(binary: Path, run: PerfAnalyzerRun, log_path: Path,
            timeout_s: float | None = None) -> tuple[list[LatencyPoint], dict[int, dict[str, float]]]:
    """Run perf_analyzer (after checking it can start) and parse its CSV; raise with its own words on failure.

    perf_analyzer refuses ``--request-count`` with a concurrency range, so a fixed-count sweep runs one
    level at a time and the results are merged.
    """
    env = check_runnable(binary)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    start, end, step = run.concurrency
    levels = list(range(start, end + 1, step))
    limit = timeout_s or len(levels) * run.max_trials * (run.measurement_interval_ms / 1000.0 + 5) + 60
    if not run.request_count or len(levels) == 1:
        if run.request_count:
            limit = max(limit, run.request_count * run.timeout_hint_s + 60)
        return _run_once(binary, run, env, log_path, limit)
    points: list[LatencyPoint] = []
    breakdown: dict[int, dict[str, float]] = {}
    for level in levels:
        single = replace(run, concurrency=(level, level, 1))
        level_points, level_breakdown = _run_once(binary, single, env, log_path,
                                                  max(limit, run.request_count * run.timeout_hint_s + 60))
        points += level_points
        breakdown.update(level_breakdown)
    _write_points_csv(run.csv_path, run.csv_path.with_name(run.csv_path.stem + ".merged.csv"), points, breakdown)
    return points, breakdown


def _write_points_csv(csv_path: Path, merged: Path, points: list[LatencyPoint],
                      breakdown: dict[int, dict[str, float]]) -> None:
    """Keep one CSV covering every level (the last single-level run overwrote ``csv_path``)."""
    columns = ["Concurrency", "Inferences/Second", *_LATENCY_PARTS, "p50 latency", "p90 latency", "p95 latency",
               "p99 latency"]
    with merged.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for p in points:
            us = [None if v is None else round(v * 1000) for v in (p.p50_ms, p.p90_ms, p.p95_ms, p.p99_ms)]
            writer.writerow([p.concurrency, p.throughput_rps,
                             *(breakdown.get(p.concurrency, {}).get(c, "") for c in _LATENCY_PARTS), *us])
    merged.replace(csv_path)

