"""The generator's repository check as deploy's entry points run it: before a build is switched to
(build_models.py) and before Triton serves it (serve_models.py).

The same :func:`generator.repository.check.check_repository` as ``python -m generator check``, with the GPU
steps' check, in-process; every mismatch goes to stderr (the container log) as one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from generator.errors import GeneratorError
from generator.repository.check import RepositoryCheck, check_repository
from generator.server.gpu_steps import gpu_step_mismatches


def checked(repository: Path) -> RepositoryCheck | None:
    """The check's verdict on ``repository`` on this machine, or None when it is not a readable build at all."""
    try:
        result = check_repository(repository, steps=gpu_step_mismatches)
    except GeneratorError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return None
    for mismatch in result.mismatches:
        print(f"mismatch: {mismatch.message}", file=sys.stderr)
    print(result.summary(), file=sys.stderr)
    return result
