"""``python -m loadtest``: turn argv into library calls, one lazily imported module per subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from generator.subcommands import build_parser as _build_parser
from generator.subcommands import run_main

from .errors import LoadTestError

COMMANDS = {
    "run": ("run", "Locust load test against a running server: CSV, HTML, PNG and summary.json."),
    "perf-analyzer": ("perf_analyzer", "perf_analyzer concurrency sweep with real images (BYTES input)."),
    "bench": ("bench", "Benchmark: raw detector ceiling, ensemble over gRPC/HTTP, per-stage costs."),
    "compare": ("compare", "Two running servers in alternating windows: before/after throughput and latency."),
    "soak": ("soak", "Long steady traffic with bad images; fails when memory, fds or /dev/shm keep growing."),
    "versus": ("versus", "The served ensemble against the same ONNX in-process (and Ultralytics), paired rounds."),
    "sizing": ("sizing", "Ramp camera streams at --fps: the largest N within --p95-ms and --max-drop, beside the formula."),
    "nms-bench": ("nms_bench", "NMS in the detector graph (--nms-in-graph) against the Python nms step, paired."),
    "engine": ("engine", "The detector engine alone (the served graph outside Triton) at fixed batch sizes."),
}

# The extra each command's third-party modules come with (pyproject.toml); named when one is missing.
EXTRAS = {"default": "loadtest", "bench": "build,loadtest", "nms-bench": "build,loadtest",
          "engine": "build,loadtest", "versus": "reference"}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    return _build_parser("python -m loadtest", "Load tests and benchmarks for the detection ensemble.",
                         "loadtest.commands", COMMANDS, EXTRAS)


def main(argv: Sequence[str] | None = None) -> int:
    parser, unavailable = build_parser()
    return run_main(parser, unavailable, LoadTestError, argv)
