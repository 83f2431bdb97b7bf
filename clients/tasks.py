"""What a pose, OBB or segmentation ensemble returns beyond boxes, cut to each image's detections.

The task comes from the ensemble's outputs in its (open) metadata, or from its config's ``task`` parameter;
the outputs of each task are ``generator.serving.contract.TASK_OUTPUTS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from clients.errors import ClientError
from generator.serving.contract import KEYPOINTS, MASK_SIZE, MASKS, ROTATED_BOXES, TASK_OUTPUTS

# The output that gives each task with boxes away (classify is not served by the ensemble yet).
_MARKERS = {KEYPOINTS: "pose", ROTATED_BOXES: "obb", MASKS: "segment"}


def task_of_outputs(names: Iterable[str]) -> str:
    """The task of an ensemble whose outputs are ``names`` (detect when no task output is among them)."""
    found = {_MARKERS[n] for n in names if n in _MARKERS}
    if len(found) > 1:
        raise ClientError(f"the ensemble's outputs name several tasks: {', '.join(sorted(found))}")
    return found.pop() if found else "detect"


def requested_outputs(task: str) -> tuple[str, ...]:
    if task not in TASK_OUTPUTS or task == "classify":
        raise ClientError(f"the clients read detect, segment, pose and obb ensembles, not task {task!r}")
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
