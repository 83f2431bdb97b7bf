"""The task of an ensemble from its outputs, each task's fields cut to one image's detections, a classifier's top
classes."""

from __future__ import annotations

import numpy as np
import pytest

from clients.detection import ModelInfo, decode_outputs
from clients.errors import ClientError
from clients.tasks import requested_outputs, task_fields, task_of_outputs
from generator.serving.contract import (
    KEYPOINTS,
    MASK_SIZE,
    MASKS,
    OUTPUTS,
    ROTATED_BOXES,
    TOP_CLASSES,
    TOP_SCORES,
)


def test_the_task_is_read_from_the_output_names() -> None:
    assert task_of_outputs(OUTPUTS) == "detect"
    assert task_of_outputs([*OUTPUTS, KEYPOINTS]) == "pose"
    assert task_of_outputs([*OUTPUTS, ROTATED_BOXES]) == "obb"
    assert task_of_outputs([*OUTPUTS, MASKS, MASK_SIZE]) == "segment"
    assert task_of_outputs([TOP_CLASSES, TOP_SCORES]) == "classify"
    with pytest.raises(ClientError, match="several tasks: obb, pose"):
        task_of_outputs([KEYPOINTS, ROTATED_BOXES])


def test_each_task_asks_for_its_outputs_and_an_unknown_one_is_refused_by_name() -> None:
    assert requested_outputs("classify") == (TOP_CLASSES, TOP_SCORES)
    assert requested_outputs("pose") == (*OUTPUTS, KEYPOINTS)
    with pytest.raises(ClientError, match="not 'depth'"):
        requested_outputs("depth")


def test_a_classifiers_outputs_become_each_images_top_classes() -> None:
    info = ModelInfo("m", 8, ("cat", "dog", "fox"), task="classify")
    results = decode_outputs({TOP_CLASSES: np.array([[2, 0], [1, 2]], np.int32),
                              TOP_SCORES: np.array([[0.7, 0.2], [0.9, 0.05]], np.float32)}, info)
    assert [len(r) for r in results] == [0, 0]  # no detections
    assert [[c.as_dict() for c in r.top] for r in results] == [
        [{"class_id": 2, "class_name": "fox", "score": pytest.approx(0.7)},
         {"class_id": 0, "class_name": "cat", "score": pytest.approx(0.2)}],
        [{"class_id": 1, "class_name": "dog", "score": pytest.approx(0.9)},
         {"class_id": 2, "class_name": "fox", "score": pytest.approx(0.05)}]]
    with pytest.raises(ClientError, match="top_classes \\(2, 2\\) and top_scores \\(2, 3\\)"):
        decode_outputs({TOP_CLASSES: np.zeros((2, 2), np.int32), TOP_SCORES: np.zeros((2, 3), np.float32)}, info)
    with pytest.raises(ClientError, match="the classify response lacks output"):
        decode_outputs({TOP_CLASSES: np.zeros((2, 2), np.int32)}, info)


def test_fields_of_one_image_stop_at_its_count() -> None:
    points = np.arange(2 * 3 * 2 * 3, dtype=np.float32).reshape(2, 3, 2, 3)
    fields = task_fields({KEYPOINTS: points}, "pose", 1, 2)
    assert fields == [{"keypoints": ((18, 19, 20), (21, 22, 23))}, {"keypoints": ((24, 25, 26), (27, 28, 29))}]
    masks = np.array([[b"ab", b""], [b"cd", b""]], dtype=object)
    fields = task_fields({MASKS: masks, MASK_SIZE: np.array([[4, 5], [6, 7]])}, "segment", 1, 1)
    assert fields == [{"mask_rle": b"cd", "mask_size": (6, 7)}]
    with pytest.raises(ClientError, match="the obb response lacks output"):
        task_fields({}, "obb", 0, 1)


def test_a_two_stage_answer_gives_the_first_boxes_their_classes() -> None:
    from generator.serving.contract import (
        BOX_CLASSES,
        BOX_SCORES,
        BOXES,
        CLASSES,
        NUM_DETECTIONS,
        SCORES,
        TWO_STAGE_OUTPUTS,
    )

    info = ModelInfo(name="m", max_batch_size=8, class_names=(), second_stage=True, classifier_names=("cat", "dog"))
    assert requested_outputs("detect", second_stage=True) == TWO_STAGE_OUTPUTS
    outputs = {NUM_DETECTIONS: np.array([[3]], np.int32), BOXES: np.zeros((1, 4, 4), np.float32),
               SCORES: np.ones((1, 4), np.float32), CLASSES: np.zeros((1, 4), np.int32),
               BOX_CLASSES: np.array([[[1, 0], [0, 1]]], np.int32),
               BOX_SCORES: np.array([[[0.75, 0.25], [0.5, 0.5]]], np.float32)}
    (result,) = decode_outputs(outputs, info)
    first, second, third = result.detections
    assert first.classified is not None and [(c.class_name, c.score) for c in first.classified] == [
        ("dog", 0.75), ("cat", 0.25)]
    assert second.classified is not None and second.classified[0].class_name == "cat"
    assert third.classified is None  # past the cap (2 rows)
    assert first.as_dict()["classified"][0] == {"class_id": 1, "class_name": "dog", "score": 0.75}
    with pytest.raises(ClientError, match="lacks output"):
        decode_outputs({k: v for k, v in outputs.items() if k != BOX_SCORES}, info)
