"""The task gate's measures: the FP32 graph's outputs are the labels, its keypoints' visibility a score."""

from __future__ import annotations

import numpy as np
import pytest

from generator.evaluation.task_gate import MEASURES, ImageOutputs, _measure
from generator.serving.contract import KEYPOINTS


def _pose(points: np.ndarray, scores: tuple[float, ...] = (0.9,)) -> ImageOutputs:
    boxes = np.array([[0.0, 0, 100, 200]] * len(points))
    return ImageOutputs(boxes, np.array(scores), np.zeros(len(points), np.int64), {KEYPOINTS: points})


def test_only_the_references_visible_keypoints_count_unless_none_is() -> None:
    truth = np.zeros((1, 17, 3))
    truth[0, :, :2] = np.arange(34).reshape(17, 2) * 3
    truth[0, :, 2] = 0.9
    oks = MEASURES["pose"]["keypoint (OKS)"]
    assert oks(_pose(truth), _pose(truth))[0, 0] == pytest.approx(1.0)
    far = truth.copy()
    far[0, 1:, 0] += 50  # every keypoint but the first far off
    hidden = truth.copy()
    hidden[0, 1:, 2] = 0.1  # the reference shows only the first: the candidate is exact there
    assert oks(_pose(far), _pose(hidden))[0, 0] == pytest.approx(1.0)
    none_visible = truth.copy()
    none_visible[0, :, 2] = 0.1  # none shown: all count, so the far ones cost
    assert oks(_pose(far), _pose(none_visible))[0, 0] < 0.2


def test_the_candidate_scored_on_the_reference_is_one_and_a_missing_detection_costs() -> None:
    truth = np.zeros((2, 17, 3))
    truth[:, :, :2] = np.arange(34).reshape(17, 2) * 3
    truth[1, :, 0] += 300
    truth[..., 2] = 0.9
    reference = _pose(truth, (0.9, 0.8))
    assert _measure([reference], [reference], MEASURES["pose"]["keypoint (OKS)"]).map50_95 == pytest.approx(0.995)
    half = _pose(truth[:1])
    assert _measure([half], [reference], MEASURES["pose"]["keypoint (OKS)"]).map50_95 < 0.6
