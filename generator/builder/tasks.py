"""Which Ultralytics tasks a build serves."""

from __future__ import annotations

from generator.errors import ModelInspectionError
from generator.model.onnx_inspect import DetectorInfo

# Tasks whose post-processing step exists; the others are recognised at inspection and refused here, by name.
SERVED_TASKS = ("detect",)


def require_served_task(info: DetectorInfo) -> None:
    """Refuse an export whose task the ensemble does not serve, naming the task and its head."""
    if info.task not in SERVED_TASKS:
        raise ModelInspectionError(
            f"{info.path.name} is an Ultralytics '{info.task}' export (head '{info.metadata.get('head', '?')}', "
            f"output {list(info.output.shape)}); the ensemble serves the tasks {', '.join(SERVED_TASKS)}")
