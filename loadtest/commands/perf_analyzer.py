"""``perf-analyzer``: a perf_analyzer concurrency sweep with real encoded images, summarised like ``run``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..errors import MetricsError
from ..images import DEFAULT_SIZES, build_corpus
from ..metrics import snapshot, stage_deltas, stages_table
from ..perf_analyzer import PerfAnalyzerRun, command, execute, locate_binary, parse_concurrency
from ..perf_inputs import write_input_data
from ..report import points_table, threshold_breaches
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
    parser.add_argument("--out", type=Path, default=Path("perf-analyzer-out"))
    parser.add_argument("--inputs-only", action="store_true",
                        help="only write the --input-data JSON and print the command")


def run(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    images = build_corpus(args.images, args.sizes, args.images_per_size)
    inputs = write_input_data(images, args.out / "input_data.json")
    config = PerfAnalyzerRun(
        url=address_of(args.url, args.protocol), protocol=args.protocol, model=args.model, input_data=inputs,
        csv_path=args.out / "perf_analyzer.csv", concurrency=parse_concurrency(args.concurrency),
        measurement_interval_ms=args.measurement_interval, stability_percentage=args.stability_percentage,
        max_trials=args.max_trials, percentile=args.percentile, request_count=args.request_count,
    )
    if args.inputs_only:
        binary = args.binary or Path("perf_analyzer")
        print(f"wrote {len(images)} images to {inputs}")
        print(shlex.join(command(binary, config)))
        return 0
    binary = locate_binary(args.binary)
    metrics_url = args.metrics_url or default_metrics_url(args.url, args.protocol)
    problems: list[str] = []
    try:
        before = snapshot(metrics_url)
    except MetricsError as exc:
        before, problems = None, [str(exc)]
    started = datetime.now(timezone.utc)
    points, breakdown = execute(binary, config, args.out / "perf_analyzer.log")
    stages = stage_deltas(before, snapshot(metrics_url)) if before is not None else None
    breaches = [
        f"concurrency {p.concurrency}: {reason}"
        for p in points
        for reason in threshold_breaches(p.p95_ms, p.fail_ratio, max(p.requests, 1), args.sla_p95_ms, None)
    ]
    summary = {
        "tool": "perf_analyzer",
        "started": started.isoformat(timespec="seconds"),
        "target": {"url": config.url, "protocol": args.protocol, "model": args.model, "metrics_url": metrics_url},
        "config": {
            "concurrency": list(config.concurrency), "measurement_interval_ms": config.measurement_interval_ms,
            "stability_percentage": config.stability_percentage, "max_trials": config.max_trials,
            "percentile": config.percentile, "request_count": config.request_count, "images": str(args.images) if args.images else None,
            "sizes": None if args.images else args.sizes, "image_count": len(images),
        },
        "points": [p.to_dict() for p in points],
        "server_breakdown_us": {str(k): v for k, v in breakdown.items()},
        "triton": {name: s.to_dict() for name, s in stages.items()} if stages is not None else None,
        "health": {"loadavg_end": [round(v, 2) for v in os.getloadavg()], "valid": True, "reasons": []},
        "thresholds": {"sla_p95_ms": args.sla_p95_ms, "breaches": breaches, "passed": not breaches},
        "problems": problems,
        "files": {"csv": str(config.csv_path), "input_data": str(inputs), "log": str(args.out / "perf_analyzer.log"),
                  "summary": str(args.out / "summary.json")},
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    for line in points_table(points):
        print(line)
    if stages is not None:
        print("Triton, whole sweep:")
        for line in stages_table(stages):
            print(line)
    for problem in problems:
        print(f"note: {problem}")
    for reason in breaches:
        print(f"FAIL: {reason}", file=sys.stderr)
    print(f"reports in {args.out}")
    return 2 if breaches else 0
