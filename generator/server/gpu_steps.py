"""What this machine lacks for a build's GPU steps, as mismatches of the repository check.

The repository check (generator/repository/check.py) imports the standard library alone, so a caller that can
import the GPU steps' environment check (generator.serving.gpu.environment) passes this function to
``check_repository(steps=...)``: ``python -m generator check`` and deploy's entry points before Triton serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.repository.check import Mismatch
    from generator.repository.manifest import Manifest


def gpu_step_mismatches(manifest: Manifest) -> list[Mismatch]:
    """What this machine lacks for the build's GPU steps (the packages they import, a device they can use)."""
    from generator.repository.check import Mismatch
    from generator.serving.gpu.environment import detector_problems, preprocess_problems

    sections = {"detector": manifest.detector.to_json() if manifest.detector else {},
                "preprocess": manifest.preprocess.to_json() if manifest.preprocess else {}}
    return ([Mismatch("gpu_detector", "detector", p) for p in detector_problems(sections)] +
            [Mismatch("gpu_preprocess", "preprocess", p) for p in preprocess_problems(sections)])
