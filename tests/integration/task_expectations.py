"""What "equal to Ultralytics' predict" means for a task head's served outputs: the issue's tolerances (boxes and
keypoints within 1 px, rotated boxes within 1 px and 1 degree, masks at the source size at an IoU of 0.95 or more,
classes equal, scores within 1e-3), shared by the static and the dynamic-batch task tests."""

from __future__ import annotations

import math

import numpy as np

from clients.rle import decode_mask
from generator.serving.contract import KEYPOINTS, MASK_SIZE, MASKS, ROTATED_BOXES, TOP_CLASSES, TOP_SCORES
from tests.fixtures.ultralytics.predict import runs_to_mask

PIXEL_TOLERANCE = 1.0
ANGLE_TOLERANCE = math.radians(1.0)
MASK_IOU = 0.95
SCORE_TOLERANCE = 1e-3  # two ONNX Runtime builds (the project's, Ultralytics' environment's) on the same graph


def same_as_predict(got: dict[str, np.ndarray], expected: dict[str, list], task: str) -> int:
    """The number of detections (or top classes) ``got`` shares with Ultralytics' recorded ``expected``, asserting
    the issue's tolerances on each."""
    if task == "classify":
        np.testing.assert_array_equal(got[TOP_CLASSES], expected["classes"])
        np.testing.assert_allclose(got[TOP_SCORES], expected["scores"], atol=SCORE_TOLERANCE)
        return len(expected["classes"])
    count = int(got["num_detections"][0])
    assert count == len(expected["scores"])
    np.testing.assert_array_equal(got["detection_classes"][:count], expected["classes"])
    np.testing.assert_allclose(got["detection_scores"][:count], expected["scores"], atol=SCORE_TOLERANCE)
    assert not got["detection_scores"][count:].any()  # padding is zero
    if task == "pose":
        np.testing.assert_allclose(got["detection_boxes"][:count], np.reshape(expected["boxes"], (-1, 4)),
                                   atol=PIXEL_TOLERANCE)
        points, want = got[KEYPOINTS][:count], np.reshape(expected["keypoints"], (count, 17, 3))
        np.testing.assert_allclose(points[..., :2], want[..., :2], atol=PIXEL_TOLERANCE)
        np.testing.assert_allclose(points[..., 2], want[..., 2], atol=SCORE_TOLERANCE)
    elif task == "obb":
        rotated, want = got[ROTATED_BOXES][:count], np.reshape(expected["rotated_boxes"], (-1, 5))
        np.testing.assert_allclose(rotated[:, :4], want[:, :4], atol=PIXEL_TOLERANCE)
        np.testing.assert_allclose(rotated[:, 4], want[:, 4], atol=ANGLE_TOLERANCE)
    else:
        np.testing.assert_allclose(got["detection_boxes"][:count], np.reshape(expected["boxes"], (-1, 4)),
                                   atol=PIXEL_TOLERANCE)
        same_masks(got, expected["mask_runs"], count)
    return count


def same_masks(got: dict[str, np.ndarray], runs: list[list[int]], count: int) -> None:
    height, width = (int(v) for v in got[MASK_SIZE])
    assert all(not m for m in got[MASKS][count:])  # padding is empty
    for index in range(len(runs)):  # the best detections' (predict.MASKS_RECORDED)
        served_mask = decode_mask(got[MASKS][index], height, width)
        want = runs_to_mask(runs[index], height, width)
        iou = (served_mask & want).sum() / max((served_mask | want).sum(), 1)
        assert iou >= MASK_IOU, f"mask {index}: IoU {iou:.4f} with Ultralytics' ({want.sum()} pixels)"
