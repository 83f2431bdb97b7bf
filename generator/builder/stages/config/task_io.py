"""The outputs and parameters a task adds to the post-processing step and the ensemble (contract.TASK_OUTPUTS)."""

from __future__ import annotations

from typing import Any

from generator.model.onnx_inspect import DetectorInfo
from generator.serving import contract


def task_outputs(info: DetectorInfo, max_detections: int) -> list[dict[str, Any]]:
    """Config outputs beyond the four detection ones, per batch item; none for detect."""
    if info.task == "pose" and info.kpt_shape is not None:
        return [{"name": contract.KEYPOINTS, "data_type": "TYPE_FP32", "dims": [max_detections, *info.kpt_shape]}]
    if info.task == "obb":
        return [{"name": contract.ROTATED_BOXES, "data_type": "TYPE_FP32", "dims": [max_detections, 5]}]
    if info.task == "segment":
        return [{"name": contract.MASKS, "data_type": "TYPE_STRING", "dims": [max_detections]},
                {"name": contract.MASK_SIZE, "data_type": "TYPE_INT32", "dims": [2]}]
    return []


def task_step_parameters(info: DetectorInfo) -> dict[str, str]:
    """What the post-processing step needs to split a task head (generator.serving.tasks.head_spec)."""
    if info.task == "detect":
        return {}
    kpt = {"kpt_shape": ",".join(map(str, info.kpt_shape))} if info.kpt_shape else {}
    protos = {"protos_input": info.protos.name} if info.protos else {}
    return {contract.TASK_PARAMETER: info.task, "num_classes": str(info.num_classes), **kpt, **protos}


def task_ensemble_parameters(info: DetectorInfo) -> dict[str, str]:
    """The ensemble names its task for the clients; a detection ensemble's config stays as it was."""
    return {} if info.task == "detect" else {contract.TASK_PARAMETER: info.task}
