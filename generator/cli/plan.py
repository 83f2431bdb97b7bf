"""``plan DIR``: build the TensorRT plan of a ``--defer-plan`` repository on this GPU host.

The one command that completes a repository written anywhere by ``build --target tensorrt --defer-plan``:
it checks the build spec against the served ONNX and the detector config, builds ``model.plan`` with this
machine's TensorRT in a child process, checks the plan's bindings the way Triton's TensorRT backend will,
records the plan in ``manifest.json`` and re-checks the repository. A failure leaves it as it was.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from generator.errors import GeneratorError

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository", type=Path, metavar="DIR", help="repository built with --defer-plan")
    parser.add_argument("--force", action="store_true", help="build the plan again although one is recorded")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="give up on the plan build after this long")


def run(args: argparse.Namespace) -> int:
    from generator.builder.plan import complete_plan
    from generator.repository.manifest import server_flags

    repository: Path = args.repository
    if not repository.is_dir():
        raise GeneratorError(f"{repository} is not a directory; pass the model repository built with --defer-plan")
    done = complete_plan(repository, force=args.force, timeout=args.timeout_s)
    report, plan = done.report, done.manifest.plan
    assert plan is not None  # complete_plan only returns repositories with a plan
    print(f"{repository}: built {plan.plan_file} ({report.plan_bytes} bytes) with TensorRT {report.tensorrt_version} "
          f"on {report.gpu_name} (compute capability {report.compute_capability}) in {report.build_seconds:.1f} s")
    flags = server_flags(done.manifest)
    if flags:
        print(f"Start Triton with: {' '.join(flags)}")
    return 0
