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

Only the standard library is imported (and, for those GPU steps, the packages they need), so the check runs
in a Triton image with just this project's source on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generator.errors import GeneratorError


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
    from generator.builder.stages.manifest import compare, plan_command, read_manifest, server_flags

    repository: Path = args.repository
    if not repository.is_dir():
        raise GeneratorError(
            f"{repository} is not a directory; pass the model repository built by generator build"
        )
    manifest = read_manifest(repository)
    machine = None
    if manifest.plan is not None and not args.files_only:
        from generator.builder.stages.tensorrt.availability import machine_facts

        machine = machine_facts()
    mismatches = compare(manifest, machine, repository)
    if not args.files_only:
        from generator.builder.stages.manifest import Mismatch
        from generator.serving.gpu.environment import detector_problems, preprocess_problems

        mismatches += [Mismatch("gpu_detector", "detector", p) for p in detector_problems(manifest.extra)]
        mismatches += [Mismatch("gpu_preprocess", "preprocess", p) for p in preprocess_problems(manifest.extra)]
    for mismatch in mismatches:
        print(f"mismatch: {mismatch.message}", file=sys.stderr)
    flags = server_flags(manifest)
    report = sys.stderr if args.server_flags else sys.stdout
    if args.server_flags:
        print(" ".join(flags))
    elif flags:
        print(f"{repository}: Triton needs {' '.join(flags)} to load this plan (version-compatible)")
    if mismatches:
        print(f"{repository}: {len(mismatches)} mismatch(es)", file=sys.stderr)
        return 1
    plan = manifest.plan
    if plan is not None and plan.pending:
        scope = "files checked; the TensorRT plan is still to be built: " + plan_command(repository)
    elif plan is None or args.files_only:
        scope = "files checked"
    else:
        source = f" ({machine.tensorrt_source})" if machine and machine.tensorrt_source else ""
        scope = f"files, TensorRT{source} and GPU checked"
    print(
        f"{repository}: {len(manifest.files)} files match the manifest ({scope}; "
        f"target {manifest.target}, precision {manifest.precision})",
        file=report,
    )
    return 0
