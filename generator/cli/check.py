"""``python -m generator check DIR``: does this repository still match its build, and will it load here?

Exit 0 when everything matches; otherwise exit 1 with one actionable line per mismatch.
Every repository gets its files checked against the manifest hashes. A repository holding a
TensorRT plan is also compared with this machine's TensorRT, CUDA driver and GPUs; where there is
no TensorRT that comparison cannot be made, which is a failure (a plan that was not checked is
not known to load) unless ``--files-only`` asks for the file check alone.
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


def run(args: argparse.Namespace) -> int:
    from generator.builder.manifest import compare, read_manifest

    repository: Path = args.repository
    if not repository.is_dir():
        raise GeneratorError(
            f"{repository} is not a directory; pass the model repository built by generator build"
        )
    manifest = read_manifest(repository)
    machine = None
    if manifest.plan is not None and not args.files_only:
        from generator.builder.tensorrt.availability import machine_facts

        machine = machine_facts()
    mismatches = compare(manifest, machine, repository)
    for mismatch in mismatches:
        print(f"mismatch: {mismatch.message}", file=sys.stderr)
    if mismatches:
        print(f"{repository}: {len(mismatches)} mismatch(es)", file=sys.stderr)
        return 1
    scope = "files" if manifest.plan is None or args.files_only else "files, TensorRT and GPU"
    print(
        f"{repository}: {len(manifest.files)} files match the manifest ({scope} checked; "
        f"target {manifest.target}, precision {manifest.precision})"
    )
    return 0
