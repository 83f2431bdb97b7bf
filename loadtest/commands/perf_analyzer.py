"""``perf-analyzer``: a perf_analyzer concurrency sweep with real encoded images, summarised like ``run``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clients import admin_token
from clients.contract import admin_headers

from ..errors import MetricsError
from ..images import DEFAULT_SIZES, build_corpus
from ..metrics import StageStats, snapshot, stage_deltas, stages_table
from ..perf_analyzer import PerfAnalyzerRun, command, execute, locate_binary, parse_concurrency
from ..perf_inputs import write_input_data
from ..report import LatencyPoint, points_table, threshold_breaches
from ..target import address_of, default_metrics_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="Triton HOST:PORT (the gRPC or HTTP port, per --protocol)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--images", type=Path, default=None, help="folder of encoded images (default: synthetic)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="synthetic image sizes")
    parser.add_argument("--images-per-size", type=int, default=4)
    parser.add_argument("--concurrency", default="1:4", help="N, START:END or START:END:STEP")
    parser.add_argument("--measurement-interval", type=int, default=5000, help="ms per measurement window")
    parser.add_argument("--stability-percentage", type=float, default=10.0,
                        help="windows must agree within this %% (perf_analyzer -s)")
    parser.add_argument("--max-trials", type=int, default=10, help="windows to try before giving up")
    parser.add_argument("--percentile", type=int, default=95, help="latency percentile used for stability")
    parser.add_argument("--request-count", type=int, default=None,
                        help="measure exactly this many requests per level instead of waiting for stability")
    parser.add_argument("--metrics-url", default=None, help="Triton metrics HOST:PORT (default: URL host, 8002)")
    parser.add_argument("--sla-p95-ms", type=float, default=None, help="exit 2 if any level's p95 exceeds this")
    parser.add_argument("--binary", type=Path, default=None, help="perf_analyzer to use (default: the venv's)")
    parser.add_argument("--out", type=Path, default=Path("runs") / "perf-analyzer", help="report folder")
    admin_token.add_arguments(parser, "for the restricted model config perf_analyzer reads", file=False)
    parser.add_argument("--inputs-only", action="store_true",
                        help="only write the --input-data JSON and print the command")


def admin_header_args(protocol: str, admin_key: str | None) -> tuple[str, ...]:
    """perf_analyzer reads the model config, which deployments restrict to the admin token (-H name:value)."""
    return tuple(arg for name, value in admin_headers(protocol, admin_key).items() for arg in ("-H", f"{name}:{value}"))


def _config(args: argparse.Namespace, inputs: Path) -> PerfAnalyzerRun:
    return PerfAnalyzerRun(
        url=address_of(args.url, args.protocol), protocol=args.protocol, model=args.model, input_data=inputs,
        csv_path=args.out / "perf_analyzer.csv", concurrency=parse_concurrency(args.concurrency),
        measurement_interval_ms=args.measurement_interval, stability_percentage=args.stability_percentage,
        max_trials=args.max_trials, percentile=args.percentile, request_count=args.request_count,
        extra_args=admin_header_args(args.protocol, admin_token.token_from(args)),
    )


def _summary(args: argparse.Namespace, config: PerfAnalyzerRun, image_count: int, points: list[LatencyPoint],
             breakdown: dict[int, dict[str, float]], stages: dict[str, StageStats] | None) -> dict[str, Any]:
    breaches = [
        f"concurrency {p.concurrency}: {reason}"
        for p in points
        for reason in threshold_breaches(p.p95_ms, p.fail_ratio, max(p.requests, 1), args.sla_p95_ms, None)
    ]
    return {
        "tool": "perf_analyzer",
        "target": {"url": config.url, "protocol": args.protocol, "model": args.model, "metrics_url": args.metrics_url},
        "config": {
            "concurrency": list(config.concurrency), "measurement_interval_ms": config.measurement_interval_ms,
            "stability_percentage": config.stability_percentage, "max_trials": config.max_trials,
            "percentile": config.percentile, "request_count": config.request_count,
            "images": str(args.images) if args.images else None, "sizes": None if args.images else args.sizes,
            "image_count": image_count,
        },
        "points": [p.to_dict() for p in points],
        "server_breakdown_us": {str(k): v for k, v in breakdown.items()},
        "triton": {name: s.to_dict() for name, s in stages.items()} if stages is not None else None,
        "health": {"loadavg_end": [round(v, 2) for v in os.getloadavg()], "valid": True, "reasons": []},
        "thresholds": {"sla_p95_ms": args.sla_p95_ms, "breaches": breaches, "passed": not breaches},
        "files": {"csv": str(config.csv_path), "input_data": str(config.input_data),
                  "log": str(args.out / "perf_analyzer.log"), "summary": str(args.out / "summary.json")},
    }


def _print_summary(summary: dict[str, Any], points: list[LatencyPoint], stages: dict[str, StageStats] | None) -> None:
    lines = points_table(points)
    if stages is not None:
        lines += ["Triton, whole sweep:", *stages_table(stages)]
    lines += [f"note: {problem}" for problem in summary["problems"]]
    print("\n".join([*lines, f"reports in {Path(summary['files']['summary']).parent}"]))
    for reason in summary["thresholds"]["breaches"]:
        print(f"FAIL: {reason}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    images = build_corpus(args.images, args.sizes, args.images_per_size)
    config = _config(args, write_input_data(images, args.out / "input_data.json"))
    if args.inputs_only:
        print(f"wrote {len(images)} images to {config.input_data}")
        print(shlex.join(command(args.binary or Path("perf_analyzer"), config)))
        return 0
    binary = locate_binary(args.binary)
    args.metrics_url = args.metrics_url or default_metrics_url(args.url, args.protocol)
    problems: list[str] = []
    try:
        before = snapshot(args.metrics_url)
    except MetricsError as exc:
        before, problems = None, [str(exc)]
    started = datetime.now(timezone.utc)
    points, breakdown = execute(binary, config, args.out / "perf_analyzer.log")
    stages = stage_deltas(before, snapshot(args.metrics_url)) if before is not None else None
    summary = {"started": started.isoformat(timespec="seconds"),
               **_summary(args, config, len(images), points, breakdown, stages), "problems": problems}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    _print_summary(summary, points, stages)
    return 2 if summary["thresholds"]["breaches"] else 0
