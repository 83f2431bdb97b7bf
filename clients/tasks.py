"""What a pose, OBB or segmentation ensemble returns beyond boxes, cut to each image's detections; a
classifier's top classes.

The task comes from the ensemble's outputs in its (open) metadata, or from its config's ``task`` parameter;
the outputs of each task are ``generator.serving.contract.TASK_OUTPUTS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from clients.errors import ClientError
from generator.serving.contract import (
    KEYPOINTS,
    MASK_SIZE,
    MASKS,
    ROTATED_BOXES,
    TASK_OUTPUTS,
    TOP_CLASSES,
    TOP_SCORES,
    TWO_STAGE_OUTPUTS,
)

# The output that gives each task away.
_MARKERS = {KEYPOINTS: "pose", ROTATED_BOXES: "obb", MASKS: "segment", TOP_CLASSES: "classify"}


def task_of_outputs(names: Iterable[str]) -> str:
    """The task of an ensemble whose outputs are ``names`` (detect when no task output is among them)."""
    found = {_MARKERS[n] for n in names if n in _MARKERS}
    if len(found) > 1:
        raise ClientError(f"the ensemble's outputs name several tasks: {', '.join(sorted(found))}")
    return found.pop() if found else "detect"


def requested_outputs(task: str, second_stage: bool = False) -> tuple[str, ...]:
    """The outputs to ask for: the task's, or a two-stage ensemble's (build --classifier)."""
    if task not in TASK_OUTPUTS:
        raise ClientError(f"the clients read the tasks {', '.join(TASK_OUTPUTS)}, not {task!r}")
    if second_stage and task == "detect":
        return TWO_STAGE_OUTPUTS
    return TASK_OUTPUTS[task]


def task_fields(outputs: Mapping[str, Any], task: str, index: int, count: int) -> list[dict[str, Any]]:
    """Per detection of image ``index``: its ``keypoints``, ``rotated_box`` or ``mask_rle`` (+ ``mask_size``)."""
    if task == "detect":
        return [{} for _ in range(count)]
    names = [n for n in requested_outputs(task) if n in (KEYPOINTS, ROTATED_BOXES, MASKS, MASK_SIZE)]
    missing = [n for n in names if outputs.get(n) is None]
    if missing:
        raise ClientError(f"the {task} response lacks output(s) {', '.join(missing)}")
    if task == "pose":
        points = np.asarray(outputs[KEYPOINTS], dtype=np.float32)[index]
        return [{"keypoints": tuple(tuple(float(v) for v in p) for p in points[k])} for k in range(count)]
    if task == "obb":
        rotated = np.asarray(outputs[ROTATED_BOXES], dtype=np.float32)[index]
        return [{"rotated_box": tuple(float(v) for v in rotated[k])} for k in range(count)]
    size = tuple(int(v) for v in np.asarray(outputs[MASK_SIZE]).reshape(-1, 2)[index])
    masks = np.asarray(outputs[MASKS], dtype=object).reshape(-1, np.asarray(outputs[MASKS]).shape[-1])[index]
    return [{"mask_rle": bytes(masks[k]), "mask_size": size} for k in range(count)]


def top_classes(outputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """A classifier's [N, k] classes and scores, checked to agree (an unbatched model's [k] get their batch axis)."""
    missing = [n for n in TASK_OUTPUTS["classify"] if outputs.get(n) is None]
    if missing:
        raise ClientError(f"the classify response lacks output(s) {', '.join(missing)}")
    classes, scores = np.asarray(outputs[TOP_CLASSES]), np.asarray(outputs[TOP_SCORES], dtype=np.float32)
    if classes.ndim == 1:
        classes, scores = classes[None], scores[None]
    if classes.ndim != 2 or classes.shape != scores.shape:
        raise ClientError(f"the classify response has {TOP_CLASSES} {classes.shape} and {TOP_SCORES} "
                          f"{scores.shape}; expected the same [N, k]")
    return classes, scores
