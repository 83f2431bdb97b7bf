"""The two-stage pipeline's crops: each kept box of the original image, as Ultralytics users cut them by hand.

``ultralytics.utils.plotting.save_one_box`` (8.4.190), which ``Results.save_crop`` calls with ``BGR=True``: the
box to centre and size, the size times ``gain`` plus ``pad`` pixels, back to corners, truncated to integers (torch's
``.long()``), clipped to the image, then the slice of the full-resolution decoded image. All of it in float32 as
torch does it on the float32 boxes. The crops stay BGR like the decoded image: the classifier's graph turns them
to RGB in its normalisation prefix, as its predictor does with a BGR array. Then each crop gets the classifier's
own resize and centre crop (``crop.resize_crop``), into one batch for all boxes of all images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .crop import center_crop_into

GAIN = np.float32(1.02)  # save_one_box's defaults
PAD = np.float32(10.0)


def crop_corners(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """save_one_box's integer corners of [K, 4] x1, y1, x2, y2 boxes in an image of ``width`` x ``height``:
    int64 [K, 4], clipped to the image (an empty slice where a box lies wholly outside it)."""
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    centre = (boxes[:, :2] + boxes[:, 2:]) / np.float32(2.0)
    size = (boxes[:, 2:] - boxes[:, :2]) * GAIN + PAD
    half = size / np.float32(2.0)
    corners = np.concatenate([centre - half, centre + half], axis=1)
    whole = np.trunc(corners).astype(np.int64)  # .long() truncates toward zero
    whole[:, 0::2] = np.clip(whole[:, 0::2], 0, width)
    whole[:, 1::2] = np.clip(whole[:, 1::2], 0, height)
    return whole


@dataclass(frozen=True)
class CropBatch:
    """The crops of one or more images, ready for the classifier: ``crops[i]`` is classified only for
    ``i < count``; later rows are zero."""

    crops: np.ndarray  # uint8 [max_boxes, size, size, 3] BGR
    count: int


def crop_boxes(image: np.ndarray, boxes: np.ndarray, size: int, max_boxes: int) -> CropBatch:
    """The classifier inputs of the first ``max_boxes`` of ``boxes`` (the detections in score order) on the
    full-resolution BGR ``image``. A box whose clipped crop is empty (it lies outside the image: never one the
    NMS step returns, which clips to the image) is classified from a black crop."""
    height, width = image.shape[:2]
    kept = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)[:max_boxes]
    crops = np.zeros((max_boxes, size, size, 3), dtype=np.uint8)
    for row, (x1, y1, x2, y2) in enumerate(crop_corners(kept, width, height)):
        if x2 > x1 and y2 > y1:
            center_crop_into(image[y1:y2, x1:x2], crops[row])
    return CropBatch(crops, len(kept))
