"""Ultralytics' YOLO txt labels of the segment, pose and obb tasks, in source pixels.

One ``<image stem>.txt`` per image, one object per line, coordinates normalised to the image's width and height
(Ultralytics' dataset layout: ``images/x.jpg`` beside ``labels/x.txt``; an image without a label file has no
objects):

- segment: ``class x1 y1 x2 y2 ...``, the object's polygon (three points or more);
- pose: ``class cx cy w h`` then the keypoints, ``x y`` or ``x y visibility`` each (the export's ``kpt_shape``);
- obb: ``class x1 y1 x2 y2 x3 y3 x4 y4``, the four corners, taken as their minimum-area rotated rectangle as
  Ultralytics does (``ops.xyxyxyxy2xywhr``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from generator.errors import GeneratorError

LABELLED_TASKS = ("segment", "pose", "obb")


@dataclass(frozen=True)
class TaskLabels:
    """One image's objects: classes and boxes always, the task's own geometry beside them."""

    classes: np.ndarray  # int64 [L]
    boxes: np.ndarray  # float64 [L, 4], xyxy (obb: the rotated box's hull)
    masks: list[dict[str, Any]] | None = None  # segment: COCO RLE of each polygon at the image's size
    keypoints: np.ndarray | None = None  # pose: [L, K, D]
    rotated: np.ndarray | None = None  # obb: [L, 5] xywhr, the angle in radians


def labels_folder(images: Path, labels: Path | None) -> Path:
    """``labels``, else the ``labels`` folder that Ultralytics pairs with an ``images`` folder."""
    if labels is not None:
        if not labels.is_dir():
            raise GeneratorError(f"--labels {labels}: a {'/'.join(LABELLED_TASKS)} build is validated on a folder "
                                 "of YOLO txt labels (one <image stem>.txt per image)")
        return labels
    parts = list(images.resolve().parts)
    if "images" not in parts:
        raise GeneratorError(f"no --labels given and {images} has no 'images' folder to pair with 'labels': pass "
                             "--labels DIR (YOLO txt labels, one <image stem>.txt per image)")
    index = len(parts) - 1 - parts[::-1].index("images")
    return Path(*parts[:index], "labels", *parts[index + 1:])


def _values(path: Path, number: int, line: str) -> tuple[int, np.ndarray]:
    try:
        fields = [float(v) for v in line.split()]
    except ValueError:
        raise GeneratorError(f"{path}:{number}: not numbers: {line.strip()[:60]!r}") from None
    if fields[0] != int(fields[0]) or fields[0] < 0:
        raise GeneratorError(f"{path}:{number}: the class {fields[0]} is not an index")
    return int(fields[0]), np.asarray(fields[1:], dtype=np.float64)


def _rotated(corners: np.ndarray) -> np.ndarray:
    (cx, cy), (w, h), angle = cv2.minAreaRect(corners.astype(np.float32))
    return np.array([cx, cy, w, h, math.radians(angle)])


def _object(task: str, values: np.ndarray, size: tuple[int, int], kpt_shape: tuple[int, int] | None,
            where: str) -> tuple[np.ndarray, Any]:
    """The box and the task's geometry of one label line's coordinates; a wrong count fails naming ``where``."""
    width, height = size
    if task == "segment":
        if len(values) < 6 or len(values) % 2:
            raise GeneratorError(f"{where}: a segment label is a class and an x y polygon of 3 points or more, "
                                 f"got {len(values)} coordinates")
        points = values.reshape(-1, 2) * (width, height)
        return np.concatenate([points.min(axis=0), points.max(axis=0)]), points.ravel()
    if task == "obb":
        if len(values) != 8:
            raise GeneratorError(f"{where}: an obb label is a class and 4 corners (8 numbers), got {len(values)}")
        points = values.reshape(4, 2) * (width, height)
        return np.concatenate([points.min(axis=0), points.max(axis=0)]), _rotated(points)
    assert kpt_shape is not None
    count, dims = kpt_shape
    if len(values) not in (4 + count * 2, 4 + count * 3):
        raise GeneratorError(f"{where}: a pose label is a class, a box and {count} keypoints of 2 or 3 numbers "
                             f"(the model's kpt_shape {list(kpt_shape)}), got {len(values)} numbers")
    cx, cy, w, h = values[:4] * (width, height, width, height)
    points = values[4:].reshape(count, -1).copy()
    points[:, :2] *= (width, height)
    if points.shape[1] < dims:  # x y labels of a model with visibility: every keypoint labelled
        points = np.concatenate([points, np.full((count, 1), 2.0)], axis=1)
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]), points[:, :dims]


def read_labels(path: Path, task: str, size: tuple[int, int], kpt_shape: tuple[int, int] | None = None
                ) -> TaskLabels:
    """The objects of one label file (none when it does not exist) on an image of ``size`` (width, height)."""
    classes, boxes, geometry = [], [], []
    lines = path.read_text().splitlines() if path.is_file() else []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cls, values = _values(path, number, line)
        box, shape = _object(task, values, size, kpt_shape, f"{path}:{number}")
        classes.append(cls)
        boxes.append(box)
        geometry.append(shape)
    return _labels(task, classes, boxes, geometry, size, kpt_shape)


def _labels(task: str, classes: list[int], boxes: list[np.ndarray], geometry: list[Any], size: tuple[int, int],
            kpt_shape: tuple[int, int] | None) -> TaskLabels:
    cls = np.asarray(classes, dtype=np.int64)
    box = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if task == "segment":
        from faster_coco_eval.core import mask

        width, height = size
        rles = [mask.frPyObjects([polygon.tolist()], height, width)[0] for polygon in geometry]
        return TaskLabels(cls, box, masks=rles)
    if task == "obb":
        return TaskLabels(cls, box, rotated=np.asarray(geometry, dtype=np.float64).reshape(-1, 5))
    assert kpt_shape is not None
    return TaskLabels(cls, box, keypoints=np.asarray(geometry, dtype=np.float64).reshape(-1, *kpt_shape))
