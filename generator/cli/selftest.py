"""``selftest``: the first command on a new GPU host. Build the demo as an FP16 TensorRT plan on this GPU,
serve it with the NGC image's ``tritonserver``, and compare its detections with the FP32 ONNX Runtime reference.

Exit 0 with a PASSED verdict, 1 with a FAILED one; on a machine that lacks TensorRT, a GPU or a
``tritonserver`` with the TensorRT backend, exit 1 at once saying what is missing and how to get it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from generator.errors import GeneratorError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tritonserver", type=Path, default=None,
                        help="tritonserver binary (default: on PATH, else /opt/tritonserver/bin/tritonserver)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the repository and the server log here (default: a temporary folder)")
    parser.add_argument("--images", type=int, default=64, help="synthetic control scenes to compare")


def run(args: argparse.Namespace) -> int:
    from generator.operate.selftest import find_tritonserver, prerequisites, run_selftest

    tritonserver = find_tritonserver(args.tritonserver)
    problems = prerequisites(tritonserver)
    if problems:
        raise GeneratorError("the selftest needs TensorRT, an NVIDIA GPU and Triton's tritonserver; this machine "
                             "lacks: " + "; ".join(problems))
    assert tritonserver is not None  # prerequisites() reports a missing server
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        verdict = run_selftest(args.workdir, tritonserver, args.images)
    else:
        with tempfile.TemporaryDirectory(prefix="tde-selftest-") as tmp:
            verdict = run_selftest(Path(tmp), tritonserver, args.images)
    print(verdict.summary())
    return 0 if verdict.passed else 1
