"""The task of an ensemble from its outputs, and each task's fields cut to one image's detections."""

from __future__ import annotations

import numpy as np
import pytest

from clients.errors import ClientError
from clients.tasks import requested_outputs, task_fields, task_of_outputs
from generator.serving.contract import KEYPOINTS, MASK_SIZE, MASKS, OUTPUTS, ROTATED_BOXES


def test_the_task_is_read_from_the_output_names() -> None:
    assert task_of_outputs(OUTPUTS) == "detect"
    assert task_of_outputs([*OUTPUTS, KEYPOINTS]) == "pose"
    assert task_of_outputs([*OUTPUTS, ROTATED_BOXES]) == "obb"
    assert task_of_outputs([*OUTPUTS, MASKS, MASK_SIZE]) == "segment"
    with pytest.raises(ClientError, match="several tasks: obb, pose"):
        task_of_outputs([KEYPOINTS, ROTATED_BOXES])


def test_a_classifier_is_refused_by_name() -> None:
    with pytest.raises(ClientError, match="not task 'classify'"):
        requested_outputs("classify")
    assert requested_outputs("pose") == (*OUTPUTS, KEYPOINTS)


def test_fields_of_one_image_stop_at_its_count() -> None:
    points = np.arange(2 * 3 * 2 * 3, dtype=np.float32).reshape(2, 3, 2, 3)
    fields = task_fields({KEYPOINTS: points}, "pose", 1, 2)
    assert fields == [{"keypoints": ((18, 19, 20), (21, 22, 23))}, {"keypoints": ((24, 25, 26), (27, 28, 29))}]
    masks = np.array([[b"ab", b""], [b"cd", b""]], dtype=object)
    fields = task_fields({MASKS: masks, MASK_SIZE: np.array([[4, 5], [6, 7]])}, "segment", 1, 1)
    assert fields == [{"mask_rle": b"cd", "mask_size": (6, 7)}]
    with pytest.raises(ClientError, match="the obb response lacks output"):
        task_fields({}, "obb", 0, 1)
