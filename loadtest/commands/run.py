"""``run``: a headless Locust load test with Triton's own statistics and a pass/fail verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..images import DEFAULT_SIZES
from ..locust_run import LocustRun, execute, format_summary, parse_duration, run_worker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="Triton HOST:PORT (the gRPC or HTTP port, per --protocol)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--model", default="yolo", help="ensemble name")
    parser.add_argument("--images", type=Path, default=None, help="folder of encoded images (default: synthetic)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help="synthetic image sizes (WIDTHxHEIGHT or vga/720p/1080p, comma-separated)")
    parser.add_argument("--images-per-size", type=int, default=4, help="synthetic images per size")
    parser.add_argument("--users", type=int, default=4, help="concurrent users (closed loop: = concurrency)")
    parser.add_argument("--spawn-rate", type=float, default=4.0, help="users started per second")
    parser.add_argument("--duration", default="60s", help="run time, e.g. 30s, 2m, 1m30s")
    parser.add_argument("--think-ms", type=float, default=0.0, help="pause between a user's requests")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-request timeout (s)")
    parser.add_argument("--metrics-url", default=None, help="Triton metrics HOST:PORT (default: URL host, 8002)")
    parser.add_argument("--sla-p95-ms", type=float, default=None, help="fail (exit 2) if p95 exceeds this")
    parser.add_argument("--max-fail-ratio", type=float, default=None, help="fail (exit 2) above this ratio")
    parser.add_argument("--max-generator-cpu", type=float, default=90.0,
                        help="mark the run invalid if a Locust process averages more than this %% of a core")
    parser.add_argument("--out", type=Path, default=Path("runs") / "locust", help="report folder")
    camera = parser.add_argument_group("cameras (one user = one camera)")
    camera.add_argument("--camera-fps", type=float, default=None, metavar="F",
                        help="camera users at F frames/s each, latest-frame-wins (default: closed-loop users)")
    camera.add_argument("--video", type=Path, default=None, help="the cameras send this video's frames "
                        "(default: --images or synthetic scenes)")
    dist = parser.add_argument_group("distributed mode")
    role = dist.add_mutually_exclusive_group()
    role.add_argument("--master", action="store_true", help="run the Locust master (reports are written here)")
    role.add_argument("--worker", action="store_true", help="run a Locust worker for --master-host")
    dist.add_argument("--expect-workers", type=int, default=0, help="master: workers to wait for")
    dist.add_argument("--local-workers", type=int, default=0,
                      help="start a master plus this many workers on this machine (one core each)")
    dist.add_argument("--master-host", default="127.0.0.1", help="worker: where the master runs")
    dist.add_argument("--master-port", type=int, default=5557, help="master bind port / worker target port")
    dist.add_argument("--master-bind-host", default="*", help="master: interface to listen on for workers")


def run(args: argparse.Namespace) -> int:
    config = LocustRun(
        url=args.url, protocol=args.protocol, model=args.model, users=args.users, spawn_rate=args.spawn_rate,
        duration_s=parse_duration(args.duration), out=args.out, images=args.images, sizes=args.sizes,
        images_per_size=args.images_per_size, metrics_url=args.metrics_url, sla_p95_ms=args.sla_p95_ms,
        max_fail_ratio=args.max_fail_ratio, max_generator_cpu=args.max_generator_cpu, think_ms=args.think_ms,
        timeout_s=args.timeout, role="master" if args.master else "worker" if args.worker else "local",
        expect_workers=args.expect_workers, local_workers=args.local_workers, master_host=args.master_host,
        master_port=args.master_port, master_bind_host=args.master_bind_host, camera_fps=args.camera_fps,
        video=args.video,
    )
    if args.worker:
        return run_worker(config)
    summary, code = execute(config)
    for line in format_summary(summary):
        print(line)
    for reason in summary["thresholds"]["breaches"]:
        print(f"FAIL: {reason}", file=sys.stderr)
    return code
