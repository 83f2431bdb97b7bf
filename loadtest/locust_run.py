"""Run Locust headless in child processes and turn its output into one verdict with Triton's own view.

Locust runs as a subprocess (``python -m locust -f loadtest/locustfile.py``): its gevent monkey-patching
stays out of this process, a crashed run cannot take the harness with it, and distributed mode
(master + workers) is the same command line with other flags. Around it this module scrapes Triton's
metrics before and after, watches the generator's CPU, and writes CSV, HTML, PNG and ``summary.json``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from .cpu import CpuMonitor, CpuReport
from .errors import LoadTestError, MetricsError, RunError
from .images import DEFAULT_SIZES, parse_sizes
from .metrics import Snapshot, StageStats, snapshot, stage_deltas, stages_table
from .report import LatencyPoint, threshold_breaches
from .target import address_of, default_metrics_url

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
PROJECT_ROOT = LOCUSTFILE.parents[1]
USER_CLASSES = {"grpc": "GrpcDetectionUser", "http": "HttpDetectionUser"}
CAMERA_CLASSES = {"grpc": "GrpcCameraUser", "http": "HttpCameraUser"}
Role = Literal["local", "master", "worker"]
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """Seconds from Locust-style durations: ``90``, ``90s``, ``1m30s``, ``2h``."""
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise LoadTestError(f"bad duration {text!r}: use e.g. 30s, 2m, 1m30s")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise LoadTestError(f"duration must be positive, got {text!r}")
    return total


@dataclass(frozen=True)
class LocustRun:
    url: str
    protocol: Literal["grpc", "http"]
    model: str
    users: int
    spawn_rate: float
    duration_s: float
    out: Path
    images: Path | None = None
    sizes: str = DEFAULT_SIZES
    images_per_size: int = 4
    metrics_url: str | None = None
    sla_p95_ms: float | None = None
    max_fail_ratio: float | None = None
    max_generator_cpu: float = 90.0
    think_ms: float = 0.0
    timeout_s: float = 30.0
    role: Role = "local"
    expect_workers: int = 0
    local_workers: int = 0
    master_host: str = "127.0.0.1"
    master_port: int = 5557
    master_bind_host: str = "*"
    camera_fps: float | None = None  # camera users (one user = one camera at this rate) instead of closed loop
    video: Path | None = None  # the cameras' frames, from a video file

    def __post_init__(self) -> None:
        if self.protocol not in USER_CLASSES:
            raise LoadTestError(f"unknown protocol {self.protocol!r}: use grpc or http")
        if self.users < 1 or self.spawn_rate <= 0:
            raise LoadTestError("--users must be >= 1 and --spawn-rate > 0")
        if self.images is not None and not self.images.is_dir():
            raise LoadTestError(f"image folder not found: {self.images}")
        parse_sizes(self.sizes)  # fail here, not inside every Locust user
        address_of(self.url, self.protocol)  # a bad URL is a user error now, not a failure per request
        if self.camera_fps is not None and not self.camera_fps > 0:
            raise LoadTestError("--camera-fps must be a positive number of frames per second")
        if self.video is not None and (self.camera_fps is None or not self.video.is_file()):
            raise LoadTestError(f"--video needs --camera-fps and an existing file: {self.video}")
        if self.role == "master" and self.expect_workers < 1:
            raise LoadTestError("--master needs --expect-workers N (N >= 1)")

    @property
    def csv_prefix(self) -> Path:
        return self.out / "locust"

    @property
    def resolved_metrics_url(self) -> str:
        if self.metrics_url:
            return self.metrics_url
        return default_metrics_url(self.url, self.protocol)


def locust_command(run: LocustRun, role: Role) -> list[str]:
    """The Locust command line for one process of ``run`` (``local``, ``master`` or ``worker``)."""
    classes = CAMERA_CLASSES if run.camera_fps is not None else USER_CLASSES
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), classes[run.protocol],
        "--host", run.url,
        "--triton-model", run.model,
        "--triton-sizes", run.sizes,
        "--triton-images-per-size", str(run.images_per_size),
        "--triton-timeout", str(run.timeout_s),
        "--triton-think-ms", str(run.think_ms),
        "--loglevel", "WARNING",
    ]
    if run.images is not None:
        command += ["--triton-images", str(run.images.resolve())]
    if run.camera_fps is not None:
        command += ["--triton-camera-fps", str(run.camera_fps)]
    if run.video is not None:
        command += ["--triton-video", str(run.video.resolve())]
    if role == "worker":
        return [*command, "--worker", "--master-host", run.master_host, "--master-port", str(run.master_port)]
    command += [
        "--headless", "--users", str(run.users), "--spawn-rate", str(run.spawn_rate),
        "--run-time", f"{run.duration_s:g}s", "--stop-timeout", str(int(run.timeout_s) + 1),
        "--csv", str(run.csv_prefix), "--csv-full-history", "--html", str(run.out / "report.html"), "--only-summary",
        "--triton-runinfo", str(run.out / "runinfo.json"),
    ]
    if run.sla_p95_ms is not None:
        command += ["--triton-sla-p95-ms", str(run.sla_p95_ms)]
    if run.max_fail_ratio is not None:
        command += ["--triton-max-fail-ratio", str(run.max_fail_ratio)]
    if role == "master":
        command += [
            "--master", "--expect-workers", str(run.expect_workers), "--expect-workers-max-wait", "120",
            "--master-bind-host", run.master_bind_host, "--master-bind-port", str(run.master_port),
        ]
    return command


def child_environment() -> dict[str, str]:
    """Let Locust children import ``loadtest``, ``clients`` and ``generator`` from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


def run_worker(run: LocustRun) -> int:
    """A worker only generates load for a master elsewhere; it reports nothing itself."""
    return subprocess.call(locust_command(run, "worker"), env=child_environment())


def _try_snapshot(url: str, problems: list[str]) -> Snapshot | None:
    try:
        return snapshot(url)
    except MetricsError as exc:
        problems.append(str(exc))
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _max_history_users(history_csv: Path) -> int:
    try:
        with history_csv.open(newline="") as handle:
            counts = [int(row["User Count"]) for row in csv.DictReader(handle) if row.get("Name") == "Aggregated"]
    except (OSError, ValueError, KeyError):
        return 0
    return max(counts, default=0)


def _health(run: LocustRun, info: dict[str, Any], cpu: CpuReport, history_users: int, throughput: float) -> dict[str, Any]:
    achieved = max(int(info.get("max_users", 0)), history_users)
    reasons: list[str] = []
    if achieved < run.users:
        reasons.append(f"only {achieved} of {run.users} users were running (spawn rate or duration too low?)")
    busiest = cpu.busiest_avg
    if busiest is not None and busiest > run.max_generator_cpu:
        reasons.append(
            f"a Locust process averaged {busiest:.0f}% of a core (limit {run.max_generator_cpu:g}%): the load "
            "generator, not the server, was the bottleneck; add workers (--local-workers N or --master/--worker)"
        )
    if info.get("cpu_warning") or info.get("worker_cpu_warning"):
        reasons.append("Locust itself warned that a load-generator process exceeded 90% CPU")
    health: dict[str, Any] = {
        "requested_users": run.users,
        "achieved_users": achieved,
        "achieved_rps": throughput,
        "workers": info.get("workers", 0),
        **cpu.to_dict(),
        "loadavg_end": [round(v, 2) for v in os.getloadavg()],
        "valid": not reasons,
        "reasons": reasons,
    }
    if run.role == "master" and run.local_workers < run.expect_workers:
        health["note"] = "remote workers' CPU is known only through Locust's own >90% warning"
    return health


def _processes(run: LocustRun, log_path: Path) -> tuple[int, CpuReport]:
    """Start Locust (and its local workers), watch their CPU, wait for the run; (exit code, CPU report)."""
    env = child_environment()
    with log_path.open("wb") as log:
        main = subprocess.Popen(locust_command(run, run.role), stdout=log, stderr=subprocess.STDOUT, env=env)
        workers = [
            subprocess.Popen(locust_command(run, "worker"), stdout=log, stderr=subprocess.STDOUT, env=env)
            for _ in range(run.local_workers)
        ]
        monitor = CpuMonitor([main.pid, *(w.pid for w in workers)]).start()
        limit = run.duration_s + run.users / run.spawn_rate + run.timeout_s + (150 if run.role == "master" else 60)
        try:
            code = main.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            main.kill()
            main.wait()
            raise RunError(f"Locust did not finish within {limit:.0f} s; see {log_path}") from None
        finally:
            cpu = monitor.stop()
            for worker in workers:
                try:
                    worker.wait(timeout=15)  # workers quit when the master does
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
    return code, cpu


def _client_point(run: LocustRun, info: dict[str, Any]) -> LatencyPoint:
    requests, failures = int(info["requests"]), int(info["failures"])
    answered = requests - failures - int(info.get("refused") or 0)  # refusals under overload are neither
    elapsed = float(info.get("elapsed_s") or 0.0)
    return LatencyPoint(
        tool="locust", concurrency=run.users, requests=requests, failures=failures,
        throughput_rps=round(answered / elapsed, 3) if elapsed > 0 else 0.0,
        p50_ms=info.get("p50_ms"), p90_ms=info.get("p90_ms"), p95_ms=info.get("p95_ms"),
        p99_ms=info.get("p99_ms"), avg_ms=info.get("avg_ms"), label=run.protocol,
    )


def _report_files(run: LocustRun, problems: list[str]) -> dict[str, str]:
    """Locust's own files, and the latency plot drawn from its history (a plot that fails is a problem noted)."""
    files: dict[str, str] = {"log": str(run.out / "locust.log"), "html": str(run.out / "report.html"),
                             "summary": str(run.out / "summary.json")}
    for suffix in ("stats", "stats_history", "failures", "exceptions"):
        files[f"csv_{suffix}"] = f"{run.csv_prefix}_{suffix}.csv"
    try:
        from .plot import plot_history

        files["plot"] = str(plot_history(Path(files["csv_stats_history"]), run.out / "latency.png",
                                         f"{run.model} over {run.protocol}, {run.users} users"))
    except (RunError, OSError, KeyError, ValueError) as exc:
        problems.append(f"no plot: {exc}")
    return files


def _summary(run: LocustRun, info: dict[str, Any], point: LatencyPoint, health: dict[str, Any],
             stages: dict[str, StageStats] | None) -> dict[str, Any]:
    breaches = threshold_breaches(point.p95_ms, point.fail_ratio, point.requests, run.sla_p95_ms, run.max_fail_ratio)
    return {
        "tool": "locust",
        "target": {"url": run.url, "protocol": run.protocol, "model": run.model, "metrics_url": run.resolved_metrics_url},
        "config": {
            "users": run.users, "spawn_rate": run.spawn_rate, "duration_s": run.duration_s,
            "images": str(run.images) if run.images else None,
            "sizes": None if run.images else run.sizes, "think_ms": run.think_ms, "mode": run.role,
            "workers": run.expect_workers,
        },
        "client": {
            **point.to_dict(),
            "min_ms": info.get("min_ms"), "max_ms": info.get("max_ms"),
            "avg_response_bytes": info.get("avg_response_bytes"), "elapsed_s": float(info.get("elapsed_s") or 0.0),
            "note": "Locust's percentiles are bucketed (2 significant digits above 100 ms)",
        },
        "points": [point.to_dict()],
        "triton": {name: s.to_dict() for name, s in stages.items()} if stages is not None else None,
        "health": health,
        "thresholds": {"sla_p95_ms": run.sla_p95_ms, "max_fail_ratio": run.max_fail_ratio, "breaches": breaches,
                       "passed": not breaches},
        "cameras": camera_summary(info.get("cameras"), run.camera_fps),
        "outputs": info.get("outputs"),  # per task: what the answers carried (loadtest/task_outputs.py)
    }


def camera_summary(rows: list[dict[str, Any]] | None, fps: float | None) -> dict[str, Any] | None:
    """Camera runs: every camera's row, and the fleet at a glance (worst p95, drop rate overall and worst)."""
    if not rows:
        return None
    frames = sum(int(r["frames"]) for r in rows)
    p95s = [r["p95_ms"] for r in rows if r["p95_ms"] is not None]
    return {
        "fps": fps, "count": len(rows), "frames": frames, "dropped": sum(int(r["dropped"]) for r in rows),
        "drop_rate": round(sum(int(r["dropped"]) for r in rows) / frames, 4) if frames else 0.0,
        "worst_drop_rate": max(float(r["drop_rate"]) for r in rows),
        "worst_p95_ms": max(p95s) if p95s else None, "per_camera": rows,
    }


def execute(run: LocustRun) -> tuple[dict[str, Any], int]:
    """Run the load test; return (summary, exit code). Exit code 2 means thresholds were breached."""
    run.out.mkdir(parents=True, exist_ok=True)
    for stale in ("runinfo.json", "summary.json"):
        (run.out / stale).unlink(missing_ok=True)
    problems: list[str] = []
    before = _try_snapshot(run.resolved_metrics_url, problems)
    role: Role = "master" if run.role == "master" or run.local_workers > 0 else "local"
    effective = replace(run, role=role, expect_workers=max(run.expect_workers, run.local_workers))
    started = datetime.now(timezone.utc)
    code, cpu = _processes(effective, run.out / "locust.log")
    after = _try_snapshot(run.resolved_metrics_url, problems) if before is not None else None
    runinfo_path = run.out / "runinfo.json"
    if not runinfo_path.exists():
        raise RunError(f"Locust exited with code {code} without results; last log lines:\n{_tail(run.out / 'locust.log')}")
    info = json.loads(runinfo_path.read_text())
    point = _client_point(run, info)
    history_users = _max_history_users(Path(f"{run.csv_prefix}_stats_history.csv"))
    files = _report_files(run, problems)
    stages = stage_deltas(before, after) if before is not None and after is not None else None
    summary = {"started": started.isoformat(timespec="seconds"),
               **_summary(effective, info, point, _health(run, info, cpu, history_users, point.throughput_rps), stages),
               "problems": problems, "locust_exit_code": code, "files": files}
    (run.out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary, 2 if summary["thresholds"]["breaches"] else 0


def format_summary(summary: dict[str, Any]) -> list[str]:
    """A few lines for the terminal."""
    c, h = summary["client"], summary["health"]

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f} ms"

    lines = [
        f"{summary['target']['model']} over {summary['target']['protocol']}: {c['requests']} requests, "
        f"{c['failures']} failed ({c['fail_ratio']:.2%}), {c['throughput_rps']:.2f} req/s, "
        f"p50 {ms(c['p50_ms'])}, p95 {ms(c['p95_ms'])}, p99 {ms(c['p99_ms'])}",
        f"users {h['achieved_users']}/{h['requested_users']}, busiest generator process "
        f"{h['generator_cpu_percent_avg_busiest_process']}% of a core, machine CPU {h['system_cpu_percent_avg']}%, "
        f"run {'valid' if h['valid'] else 'NOT valid'}",
    ]
    lines += [f"  invalid: {reason}" for reason in h["reasons"]]
    cameras = summary.get("cameras")
    if cameras:
        lines.append(f"{cameras['count']} cameras at {cameras['fps']:g} frames/s: {cameras['frames']} frames due, "
                     f"{cameras['dropped']} dropped ({cameras['drop_rate']:.1%}; worst camera "
                     f"{cameras['worst_drop_rate']:.1%}), worst camera p95 {ms(cameras['worst_p95_ms'])}")
    for task, counts in (summary.get("outputs") or {}).items():
        per = ", ".join(f"{v:g} {k.replace('_', ' ')}" for k, v in counts["per_answer"].items())
        lines.append(f"{task} answers checked: {counts['answers']}" + (f", per answer {per}" if per else ""))
    if summary["triton"]:
        lines += stages_table({k: StageStats(**v) for k, v in summary["triton"].items()})
    lines += [f"note: {p}" for p in summary["problems"]]
    lines.append(f"reports in {Path(summary['files']['summary']).parent}")
    return lines


