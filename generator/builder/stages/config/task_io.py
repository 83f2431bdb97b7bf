"""The outputs and parameters a task adds to the post-processing step and the ensemble (contract.TASK_OUTPUTS)."""

from __future__ import annotations

from typing import Any

from generator.model.onnx_inspect import DetectorInfo
from generator.serving import contract


def top_k(info: DetectorInfo, requested: int) -> int:
    """How many classes a classifier returns: ``--top-k``, at most its class count."""
    return min(requested, info.num_classes)


def task_outputs(info: DetectorInfo, max_detections: int, requested_top_k: int = 5) -> list[dict[str, Any]]:
    """Config outputs beyond the four detection ones, per batch item (a classifier's replace them); none for
    detect."""
    if info.task == "classify":
        k = [top_k(info, requested_top_k)]
        return [{"name": contract.TOP_CLASSES, "data_type": "TYPE_INT32", "dims": k},
                {"name": contract.TOP_SCORES, "data_type": "TYPE_FP32", "dims": k}]
    if info.task == "pose" and info.kpt_shape is not None:
        return [{"name": contract.KEYPOINTS, "data_type": "TYPE_FP32", "dims": [max_detections, *info.kpt_shape]}]
    if info.task == "obb":
        return [{"name": contract.ROTATED_BOXES, "data_type": "TYPE_FP32", "dims": [max_detections, 5]}]
    if info.task == "segment":
        return [{"name": contract.MASKS, "data_type": "TYPE_STRING", "dims": [max_detections]},
                {"name": contract.MASK_SIZE, "data_type": "TYPE_INT32", "dims": [2]}]
    return []


def task_step_parameters(info: DetectorInfo, requested_top_k: int = 5) -> dict[str, str]:
    """What the post-processing step needs to split a task head (generator.serving.tasks.head_spec)."""
    if info.task == "detect":
        return {}
    if info.task == "classify":
        return {contract.TASK_PARAMETER: info.task, "num_classes": str(info.num_classes),
                "top_k": str(top_k(info, requested_top_k))}
    kpt = {"kpt_shape": ",".join(map(str, info.kpt_shape))} if info.kpt_shape else {}
    protos = {"protos_input": info.protos.name} if info.protos else {}
    return {contract.TASK_PARAMETER: info.task, "num_classes": str(info.num_classes), **kpt, **protos}


def task_ensemble_parameters(info: DetectorInfo) -> dict[str, str]:
    """The ensemble names its task for the clients; a detection ensemble's config stays as it was."""
    return {} if info.task == "detect" else {contract.TASK_PARAMETER: info.task}


def task_preprocess_parameters(info: DetectorInfo) -> dict[str, str]:
    """A classifier's input is a centre crop (generator.serving.crop), decoded at full resolution as Ultralytics'
    classify predict reads it; the detection tasks' letterbox needs nothing."""
    return {"resize": "center_crop", "reduced_decode": "false"} if info.task == "classify" else {}


def classifies(info: DetectorInfo) -> bool:
    """The post-processing step and the ensemble return only the classifier's outputs (no detections)."""
    return info.task == "classify"
