"""``nms-bench``: NMS inside the detector graph (``--nms-in-graph``) against the Python nms step, paired.

Prints one JSON object: the medians and minima of both, and the median of the paired differences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..nms_bench import bench


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--onnx", type=Path, default=None, help="detector ONNX (default: the bundled demo)")
    parser.add_argument("--batch", type=int, default=8, help="images per run (1 for a static batch-1 export)")
    parser.add_argument("--conf", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1,
                        help="ONNX Runtime intra-op threads (the Python step has one)")


def run(args: argparse.Namespace) -> int:
    from generator.demo import DEMO_ONNX

    print(json.dumps(bench(args.onnx or DEMO_ONNX, args.batch, args.conf, args.rounds, args.threads)))
    return 0
