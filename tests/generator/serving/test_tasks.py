"""Pose and OBB post-processing (generator.serving.tasks) against plain one-box-at-a-time references.

The served outputs against Ultralytics' own predict are tests/integration/test_task_heads.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from generator.serving.contract import KEYPOINTS, ROTATED_BOXES
from generator.serving.letterbox import Letterbox
from generator.serving.nms import postprocess
from generator.serving.tasks import HeadSpec, head_spec, postprocess_task, probiou, rotated_nms

IDENTITY = np.array([[0, 0, 1, 1, 640, 640]], dtype=np.float32)


def fast_nms_reference(xywhr: np.ndarray, scores: np.ndarray, groups: np.ndarray, threshold: float) -> list[int]:
    """Fast-NMS as written in the paper: drop a box that any better box of its group overlaps."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    kept = []
    for position, i in enumerate(order):
        better = [j for j in order[:position] if groups[j] == groups[i]]
        if not any(probiou(xywhr[[j]], xywhr[[i]])[0] > threshold for j in better):
            kept.append(i)
    return kept


def test_probiou_is_one_for_the_same_box_and_falls_with_distance_and_turn() -> None:
    box = np.array([[100.0, 100.0, 40.0, 10.0, 0.3]])
    assert probiou(box, box)[0] == pytest.approx(1.0, abs=1e-3)
    shifted, turned = box.copy(), box.copy()
    shifted[0, 0] += 10
    turned[0, 4] += math.pi / 4
    far = box.copy()
    far[0, 0] += 1000
    assert 0 < probiou(box, shifted)[0] < 1 and 0 < probiou(box, turned)[0] < 1
    assert probiou(box, far)[0] < 1e-3
    # A box turned by pi is the same box; w and h swapped with a quarter turn too.
    assert probiou(box, box + np.array([0, 0, 0, 0, math.pi]))[0] == pytest.approx(1.0, abs=1e-3)
    assert probiou(box, np.array([[100.0, 100.0, 10.0, 40.0, 0.3 + math.pi / 2]]))[0] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("seed", range(5))
def test_rotated_nms_is_fast_nms_per_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    count = 120
    xywhr = np.column_stack([rng.uniform(0, 200, (count, 2)), rng.uniform(5, 60, (count, 2)),
                             rng.uniform(-math.pi / 4, 3 * math.pi / 4, count)])
    scores = rng.uniform(0.1, 1.0, count).astype(np.float32)
    groups = rng.integers(0, 6, count)
    kept = rotated_nms(xywhr, scores, groups, 0.45)
    assert sorted(kept.tolist()) == sorted(fast_nms_reference(xywhr, scores, groups, 0.45))
    assert np.all(np.diff(scores[kept]) <= 0)  # by score
    assert 0 < len(kept) < count


def test_rotated_nms_drops_a_box_whose_suppressor_was_itself_suppressed() -> None:
    """Ultralytics' Fast-NMS, not greedy NMS: C overlaps only B, B is dropped by A, and C is dropped all the same."""
    xywhr = np.array([[0, 0, 10, 10, 0], [3, 0, 10, 10, 0], [6, 0, 10, 10, 0]], dtype=np.float64)
    scores = np.array([0.9, 0.8, 0.7])
    pairs = probiou(xywhr[[0, 1, 0]], xywhr[[1, 2, 2]])
    assert pairs[0] > 0.5 and pairs[1] > 0.5 and pairs[2] < 0.5  # the premise
    assert rotated_nms(xywhr, scores, np.zeros(3, dtype=np.int64), 0.5).tolist() == [0]


def _head(rows: list[list[float]], anchors: int = 8) -> np.ndarray:
    """A one-image head [1, R, anchors] whose first anchors are ``rows`` (the rest score zero)."""
    raw = np.zeros((1, len(rows[0]), anchors), dtype=np.float32)
    raw[0, :, : len(rows)] = np.array(rows, dtype=np.float32).T
    return raw


def test_pose_keypoints_follow_their_box_back_to_source_pixels_and_are_clipped() -> None:
    # Two classes, two keypoints of (x, y, visibility); the second box overlaps the first (same class): dropped.
    raw = _head([[100, 100, 40, 40, 0.9, 0.1, 90, 95, 0.8, 400, 10, 0.3],
                 [102, 100, 40, 40, 0.8, 0.1, 0, 0, 0, 0, 0, 0],
                 [200, 200, 20, 20, 0.1, 0.7, 195, 205, 0.6, 210, 190, 0.9]])
    letterbox = Letterbox(pad_x=0, pad_y=40, gain_x=0.5, gain_y=0.5, source_width=640, source_height=480).as_array()
    out = postprocess_task(raw, HeadSpec("pose", 2, (2, 3)), letterbox[None], 0.25, 0.45, 5)
    det = out.detections
    assert det.num_detections.tolist() == [[2]]
    assert det.classes[0, :2].tolist() == [0, 1] and det.scores[0, :2] == pytest.approx([0.9, 0.7])
    np.testing.assert_allclose(det.boxes[0, 0], [160, 80, 240, 160])
    keypoints = out.extras[KEYPOINTS]
    assert keypoints.shape == (1, 5, 2, 3)
    np.testing.assert_allclose(keypoints[0, 0], [[180, 110, 0.8], [640, 0, 0.3]])  # (400, 10) clipped
    np.testing.assert_allclose(keypoints[0, 1], [[390, 330, 0.6], [420, 300, 0.9]])
    assert not keypoints[0, 2:].any()


def test_obb_rotated_boxes_come_back_unclipped_with_their_hull_as_the_box() -> None:
    raw = _head([[100, 100, 40, 20, 0.9, math.pi / 2],
                 [100, 100, 40, 20, 0.5, math.pi / 2 + 0.01],  # the same box: suppressed
                 [300, 50, 60, 10, 0.6, 0.0]])
    letterbox = Letterbox(pad_x=10, pad_y=0, gain_x=0.5, gain_y=0.5, source_width=600, source_height=400).as_array()
    out = postprocess_task(raw, HeadSpec("obb", 1), letterbox[None], 0.25, 0.45, 4)
    det = out.detections
    assert det.num_detections.tolist() == [[2]]
    rotated = out.extras[ROTATED_BOXES]
    np.testing.assert_allclose(rotated[0, :2], np.array([[180, 200, 80, 40, math.pi / 2], [580, 100, 120, 20, 0]]),
                               rtol=1e-6)
    # A quarter turn swaps the hull's sides; the second box's hull reaches past the image and is clipped.
    np.testing.assert_allclose(det.boxes[0, :2], [[160, 160, 200, 240], [520, 90, 600, 110]], atol=1e-3)
    assert not rotated[0, 2:].any()


def test_detection_layouts_pass_through_unchanged() -> None:
    rng = np.random.default_rng(3)
    raw = rng.uniform(0, 1, (2, 6, 50)).astype(np.float32)
    raw[:, :4] *= 300
    letterbox = np.repeat(IDENTITY, 2, axis=0)
    found = postprocess_task(raw, HeadSpec("v8", 2), letterbox, 0.25, 0.45, 10)
    expected = postprocess(raw, "v8", letterbox, 0.25, 0.45, 10)
    assert found.extras == {}
    for got, want in zip(vars(found.detections).values(), vars(expected).values(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_head_spec_from_the_step_parameters() -> None:
    assert head_spec({"layout": "pose", "num_classes": "1", "kpt_shape": "17,3"}) == HeadSpec("pose", 1, (17, 3))
    assert head_spec({"layout": "v8"}) == HeadSpec("v8", 0, None)


def test_a_batch_keeps_each_image_to_its_own_rows() -> None:
    one = _head([[100, 100, 40, 20, 0.9, 0.0], [300, 50, 60, 10, 0.6, 0.0]])
    two = _head([[50, 60, 30, 30, 0.8, 1.0]])
    raw = np.concatenate([one, two, np.zeros_like(one)])
    out = postprocess_task(raw, HeadSpec("obb", 1), np.repeat(IDENTITY, 3, axis=0), 0.25, 0.45, 4)
    assert out.detections.num_detections[:, 0].tolist() == [2, 1, 0]
    np.testing.assert_allclose(out.extras[ROTATED_BOXES][1, 0], [50, 60, 30, 30, 1.0])


def test_rotated_nms_in_small_chunks_of_pairs_keeps_the_same_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    from generator.serving import tasks

    rng = np.random.default_rng(9)
    xywhr = np.column_stack([rng.uniform(0, 100, (80, 2)), rng.uniform(5, 40, (80, 2)), rng.uniform(0, 3, 80)])
    scores, groups = rng.uniform(0.1, 1, 80), rng.integers(0, 2, 80)
    whole = rotated_nms(xywhr, scores, groups, 0.45)
    monkeypatch.setattr(tasks, "PAIR_CHUNK", 7)
    np.testing.assert_array_equal(rotated_nms(xywhr, scores, groups, 0.45), whole)


def test_a_classifier_returns_its_best_classes_best_first_and_ties_by_class() -> None:
    from generator.serving.contract import TOP_CLASSES, TOP_SCORES
    from generator.serving.tasks import top_classes

    probabilities = np.array([[0.1, 0.5, 0.1, 0.3], [0.25, 0.25, 0.25, 0.25]], dtype=np.float32)
    found = top_classes(probabilities, 3)
    np.testing.assert_array_equal(found[TOP_CLASSES], [[1, 3, 0], [0, 1, 2]])
    np.testing.assert_array_equal(found[TOP_SCORES], np.array([[0.5, 0.3, 0.1], [0.25, 0.25, 0.25]], np.float32))
    assert found[TOP_CLASSES].dtype == np.int32 and found[TOP_SCORES].dtype == np.float32
    with pytest.raises(ValueError, match="non-finite probability"):
        top_classes(np.array([[np.nan, 1.0]], dtype=np.float32), 1)
