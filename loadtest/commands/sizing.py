"""``sizing``: ramp camera streams against a running server; the largest N within the limits, beside the formula."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

from clients import admin_token

from ..errors import LoadTestError
from ..machine import machine_info
from ..memory_budget import MemoryBudget, parse_size
from ..sizing import DEFAULT_UTILISATION, Limits, Target, frames_for
from ..sizing_report import Ramp, plot_sizing, run_sizing, summary_lines
from ..target import default_metrics_url, user_address


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the server: HOST:PORT (gRPC) or grpc[s]:// / http[s]:// URL")
    parser.add_argument("--protocol", choices=("grpc", "http"), default=None)
    parser.add_argument("--ca-cert", type=Path, default=None, help="CA certificate for grpcs:// and https:// URLs")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--fps", type=float, required=True, help="frames per second of each camera")
    parser.add_argument("--p95-ms", type=float, required=True, help="limit on every stream's end-to-end p95")
    parser.add_argument("--max-drop", type=float, default=0.01, help="limit on every stream's dropped share")
    parser.add_argument("--utilisation", type=float, default=DEFAULT_UTILISATION,
                        help="U of the formula: the share of the server's time the streams may fill")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured per level")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds per level before measuring")
    parser.add_argument("--max-streams", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=5.0, help="per-frame deadline (s)")
    parser.add_argument("--video", type=Path, default=None, help="send this video's frames (default: synthetic)")
    parser.add_argument("--sizes", default="1280x720", help="synthetic frame sizes (default: %(default)s)")
    parser.add_argument("--metrics-url", default=None, help="Triton metrics HOST:PORT for t_inf (default: URL host, "
                        "8002; a TLS URL has none unless given)")
    parser.add_argument("--server-pid", type=int, default=None, help="tritonserver's pid for the RSS peak (default: "
                        "the process listening on the URL's port, when it is on this machine)")
    admin_token.add_arguments(parser, "for the restricted model config, if the server wants it", file=False,
                              env_default=False)
    parser.add_argument("--memory-budget", default=None, help="the site's RAM for the server (e.g. 4GiB): a level "
                        "whose RSS peak (tritonserver and its stubs) exceeds it fails; needs the server on this machine")
    parser.add_argument("--vram-budget", default=None, help="the site's GPU memory for the server (e.g. 6GiB): a "
                        "level whose GPU memory peak exceeds it fails; needs NVML")
    parser.add_argument("--label", default="sizing")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: runs/sizing)")


def _server_pid(args: argparse.Namespace, address: str) -> int | None:
    if args.server_pid:
        return int(args.server_pid)
    from ..resources import listening_pid

    try:
        return listening_pid(int(address.split("/", 1)[0].rpartition(":")[2]))
    except LoadTestError:
        return None  # another machine (or the deploy's proxy): RSS is not measured, and the report says so


def _budget(args: argparse.Namespace, server_pid: int | None) -> MemoryBudget | None:
    """The budgets asked for, refused where their counter does not exist here (never a silent pass)."""
    if args.memory_budget is None and args.vram_budget is None:
        return None
    budget = MemoryBudget(None if args.memory_budget is None else parse_size(args.memory_budget, "--memory-budget"),
                          None if args.vram_budget is None else parse_size(args.vram_budget, "--vram-budget"))
    if budget.ram_bytes is not None and server_pid is None:
        raise LoadTestError("--memory-budget needs the server's processes on this machine: pass --server-pid, or a "
                            "plain (non-TLS) URL of a server listening here")
    if budget.vram_bytes is not None:
        from generator.server.gpu_metrics import GpuMonitor
        from generator.server.jetson_metrics import JetsonUnavailable, find_tool

        monitor = GpuMonitor()
        if not monitor.available:
            try:
                find_tool("JETSON_TEGRASTATS", "/usr/bin/tegrastats")  # a Jetson: the board's shared RAM
            except JetsonUnavailable as exc:
                raise LoadTestError(f"--vram-budget needs GPU memory counters: {monitor.unavailable}; {exc}") from None
    return budget


def run(args: argparse.Namespace) -> int:
    from clients.endpoint import tls_options
    from clients.errors import ClientError

    if not (args.fps > 0 and args.p95_ms > 0 and 0 <= args.max_drop < 1 and 0 < args.utilisation <= 1):
        raise LoadTestError("need --fps > 0, --p95-ms > 0, 0 <= --max-drop < 1 and 0 < --utilisation <= 1")
    if args.max_streams < 1 or args.window <= 0 or args.warmup < 0:
        raise LoadTestError("need --max-streams >= 1, --window > 0 and --warmup >= 0")
    address, tls = user_address(args.url, args.protocol or "grpc")
    try:
        options = tls_options(args.url, args.protocol, args.ca_cert)
    except ClientError as exc:
        raise LoadTestError(str(exc)) from None
    metrics = args.metrics_url or (None if tls else default_metrics_url(args.url, args.protocol or "grpc"))
    target = Target(args.url, args.protocol, args.model, args.timeout, options, admin_token.token_from(args))
    # A TLS URL is the deploy's proxy, not the server's port: its RSS needs --server-pid.
    server_pid = int(args.server_pid) if args.server_pid else None if tls else _server_pid(args, address)
    plan = Ramp(Limits(args.fps, args.p95_ms, args.max_drop), args.utilisation, args.warmup, args.window,
                args.max_streams, metrics, server_pid, _budget(args, server_pid))
    started = datetime.now(timezone.utc)
    record = run_sizing(target, frames_for(args.video, args.sizes), plan)
    out = args.out or Path("runs") / "sizing"
    stem = f"{started.strftime('%Y%m%dT%H%M%SZ')}-{args.label}"
    record = {"started": started.isoformat(timespec="seconds"), "label": args.label,
              "target": {"url": args.url, "model": args.model,
                         "frames": str(args.video.name) if args.video else f"synthetic {args.sizes} JPEG"},
              "machine": machine_info(), **record}
    out.mkdir(parents=True, exist_ok=True)
    record["files"] = {"json": str(out / f"{stem}.json"),
                       "plot": str(plot_sizing(record, out / f"{stem}.png",
                                               f"{args.model}: cameras at {args.fps:g} frames/s ({args.label})"))}
    (out / f"{stem}.json").write_text(json.dumps(record, indent=2))
    for line in summary_lines(record):
        print(line)
    print(f"report: {record['files']['json']}, plot: {record['files']['plot']}")
    return 0
