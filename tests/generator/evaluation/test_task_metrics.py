"""The task measures: the generic AP is COCO's on boxes, and OKS, rotated IoU and mask IoU behave as defined."""

from __future__ import annotations

import math

import numpy as np
import pytest

from generator.evaluation.accuracy import coco_map, pseudo_labels
from generator.evaluation.reference import ImageDetections
from generator.evaluation.task_metrics import (
    COCO_KPT_SIGMAS,
    Matchable,
    box_iou,
    matched_ap,
    oks,
    rotated_iou,
)


def _random_detections(rng: np.random.Generator, count: int, classes: int) -> ImageDetections:
    xy = rng.uniform(0, 500, size=(count, 2))
    wh = rng.uniform(10, 120, size=(count, 2))
    return ImageDetections(np.concatenate([xy, xy + wh], 1).astype(np.float32),
                           rng.uniform(0.01, 1, count).astype(np.float32), rng.integers(0, classes, count))


def test_matched_ap_on_boxes_equals_faster_coco_eval() -> None:
    """The one AP every task measure shares, on boxes, against the detection gate's COCO evaluation."""
    rng = np.random.default_rng(3)
    ids = range(1, 9)
    images = [{"id": i, "file_name": f"{i}.png", "width": 640, "height": 640} for i in ids]
    truth = {i: _random_detections(rng, 12, 3) for i in ids}
    predictions: dict[int, ImageDetections] = {}
    for image_id, det in truth.items():
        jitter = rng.normal(0, 6, size=det.boxes.shape).astype(np.float32)
        extra = _random_detections(rng, 5, 3)
        predictions[image_id] = ImageDetections(np.concatenate([det.boxes + jitter, extra.boxes]),
                                                np.concatenate([rng.uniform(0.2, 1, 12), extra.scores]),
                                                np.concatenate([det.classes, extra.classes]))
    expected = coco_map(pseudo_labels(images, truth, 3), predictions)
    items = [Matchable(predictions[k].classes, predictions[k].scores, truth[k].classes,
                       box_iou(predictions[k].boxes, truth[k].boxes)) for k in truth]
    measured = matched_ap(items)
    assert 0.2 < expected.map50_95 < 0.95, "a comparison at 0 or 1 would prove little"
    assert measured == pytest.approx((expected.map50_95, expected.map50), abs=1e-6)


def test_matched_ap_is_one_on_itself_and_zero_without_matches() -> None:
    boxes = np.array([[0, 0, 10, 10], [20, 20, 40, 40]], dtype=np.float32)
    same = Matchable(np.array([0, 1]), np.array([0.9, 0.8]), np.array([0, 1]), box_iou(boxes, boxes))
    assert matched_ap([same]) == (1.0, 1.0)
    wrong_class = Matchable(np.array([1, 0]), np.array([0.9, 0.8]), np.array([0, 1]), box_iou(boxes, boxes))
    assert matched_ap([wrong_class]) == (0.0, 0.0)
    assert matched_ap([Matchable(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros((0, 0)))]) == (0.0, 0.0)


def test_oks_follows_coco_definition() -> None:
    truth = np.zeros((1, 17, 3))
    truth[0, :, :2] = np.arange(34).reshape(17, 2) * 3
    truth[0, :, 2] = 0.9
    boxes = np.array([[0.0, 0.0, 100.0, 200.0]])
    assert oks(truth, truth, boxes)[0, 0] == pytest.approx(1.0)
    shifted = truth.copy()
    shifted[0, :, 0] += 2.0  # every keypoint 2 px off
    area = 100 * 200 * 0.53
    expected = np.mean(np.exp(-4.0 / ((2 * COCO_KPT_SIGMAS) ** 2 * area * 2)))
    assert oks(shifted, truth, boxes)[0, 0] == pytest.approx(expected, rel=1e-6)
    hidden = truth.copy()
    hidden[0, 1:, 2] = 0.1  # only the first keypoint counts; it is exact
    far = shifted.copy()
    far[0, 0, 0] = truth[0, 0, 0]
    assert oks(far, hidden, boxes)[0, 0] == pytest.approx(1.0)


def test_rotated_iou_of_rotated_boxes() -> None:
    box = np.array([[100.0, 100.0, 60.0, 20.0, 0.3]])
    assert rotated_iou(box, box)[0, 0] == pytest.approx(1.0, abs=1e-3)  # 1 - sqrt(eps): probiou of a box with itself
    turned = box.copy()
    turned[0, 4] += math.pi / 2
    apart = box.copy()
    apart[0, 0] += 500
    ious = rotated_iou(box, np.concatenate([turned, apart]))
    assert 0.0 < ious[0, 0] < 0.6 and ious[0, 1] == pytest.approx(0.0, abs=1e-6)
    assert rotated_iou(box, np.zeros((0, 5))).shape == (1, 0)
