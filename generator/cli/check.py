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
from typing import TYPE_CHECKING

from generator.errors import GeneratorError

if TYPE_CHECKING:
    from generator.builder.stages.manifest import Manifest, Mismatch
    from generator.builder.stages.tensorrt.availability import MachineFacts
    from generator.builder.stages.versions import RepositoryIndex


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


def _gpu_mismatches(manifest: Manifest, files_only: bool) -> list[Mismatch]:
    if files_only:
        return []
    from generator.builder.stages.manifest import Mismatch
    from generator.serving.gpu.environment import detector_problems, preprocess_problems

    return ([Mismatch("gpu_detector", "detector", p) for p in detector_problems(manifest.extra)] +
            [Mismatch("gpu_preprocess", "preprocess", p) for p in preprocess_problems(manifest.extra)])


def _check_versions(repository: Path, index: RepositoryIndex, args: argparse.Namespace) -> int:
    """Every served version against its own manifest (and this machine), then the alias and stray folders."""
    from generator.builder.stages.manifest import server_flags
    from generator.builder.stages.version_check import check_alias, check_version, stray_entries

    mismatches = check_alias(repository, index) + stray_entries(repository, index)
    flags: list[str] = []
    for version in index.served:
        report = check_version(repository, index, version, _machine(repository, index, version, args))
        mismatches += report.mismatches + _gpu_mismatches(report.manifest, args.files_only)
        flags += [f for f in server_flags(report.manifest) if f not in flags]
        state = index.versions[version].state
        print(f"{repository}: version {version} ({state}): {len(report.manifest.files)} files checked "
              f"(target {report.manifest.target}, precision {report.manifest.precision})",
              file=sys.stderr if args.server_flags else sys.stdout)
    for mismatch in mismatches:
        print(f"mismatch: {mismatch.message}", file=sys.stderr)
    if args.server_flags:
        print(" ".join(flags))
    if mismatches:
        print(f"{repository}: {len(mismatches)} mismatch(es)", file=sys.stderr)
        return 1
    print(f"{repository}: versions {', '.join(map(str, index.served))} match their manifests; the alias "
          f"'{index.name}' serves version {index.stable}", file=sys.stderr if args.server_flags else sys.stdout)
    return 0


def _machine(repository: Path, index: RepositoryIndex, version: int, args: argparse.Namespace) -> MachineFacts | None:
    from generator.builder.stages.version_check import read_version_manifest

    if args.files_only or read_version_manifest(repository, index.name, version).plan is None:
        return None
    from generator.builder.stages.tensorrt.availability import machine_facts

    return machine_facts()


def run(args: argparse.Namespace) -> int:
    from generator.builder.stages.manifest import compare, plan_command, read_manifest, server_flags

    repository: Path = args.repository
    if not repository.is_dir():
        raise GeneratorError(
            f"{repository} is not a directory; pass the model repository built by generator build"
        )
    from generator.builder.stages.versions import read_index

    index = read_index(repository)
    if index is not None:
        return _check_versions(repository, index, args)
    manifest = read_manifest(repository)
    machine = None
    if manifest.plan is not None and not args.files_only:
        from generator.builder.stages.tensorrt.availability import machine_facts

        machine = machine_facts()
    mismatches = compare(manifest, machine, repository) + _gpu_mismatches(manifest, args.files_only)
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
