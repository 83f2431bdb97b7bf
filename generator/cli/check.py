"""``python -m generator check DIR``: does this repository still match its build, and will it load here?

Exit 0 when everything matches; otherwise exit 1 with one actionable line per mismatch.
Every repository gets its files checked against the manifest hashes. A repository holding a
TensorRT plan is also compared with this machine's TensorRT library (``libnvinfer``, the one Triton's
TensorRT backend will deserialise the plan with; no ``tensorrt`` Python package needed), CUDA driver
and GPUs; where there is no TensorRT that comparison cannot be made, which is a failure (a plan that
was not checked is not known to load) unless ``--files-only`` asks for the file check alone. A
repository whose plan is still to be built (``--defer-plan``) says which command builds it. A repository
whose Python steps run on the GPU (``--preprocess-device gpu``, ``--target embedded --device gpu``) is checked
for the packages they import and a GPU they can use (``generator.serving.gpu.environment``).

The check itself is :func:`generator.repository.check.check_repository` (deploy's entry points and the load tests
call it too); this command prints its verdict. Only the standard library is imported (and, for those GPU steps,
the packages they need), so the check runs in a Triton image with just this project's source on ``PYTHONPATH``,
``python -S`` included, versioned repositories too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository", type=Path, metavar="DIR", help="model repository with manifest.json")
    parser.add_argument(
        "--files-only",
        "--offline",
        action="store_true",
        help="only check file hashes; skip the TensorRT/GPU comparison (for machines that will not serve the plan)",
    )
    parser.add_argument(
        "--server-flags",
        action="store_true",
        help="print only the tritonserver flags this repository needs on stdout (for entrypoints: "
        "flags=$(python -m generator check --server-flags DIR) && exec tritonserver ... $flags); reports go to stderr",
    )


def run(args: argparse.Namespace) -> int:
    from generator.repository.check import check_repository
    from generator.server.gpu_steps import gpu_step_mismatches

    repository: Path = args.repository
    result = check_repository(repository, files_only=args.files_only, steps=gpu_step_mismatches)
    report = sys.stderr if args.server_flags else sys.stdout
    for line in result.progress():
        print(line, file=report)
    for mismatch in result.mismatches:
        print(f"mismatch: {mismatch.message}", file=sys.stderr)
    flags = " ".join(result.server_flags)
    if args.server_flags:
        print(flags)
    elif flags and result.index is None:
        print(f"{repository}: Triton needs {flags} to load this plan (version-compatible)")
    print(result.summary(), file=sys.stderr if not result.ok else report)
    return 0 if result.ok else 1
