"""What the Locust users check in each task's answer, on hand-made answers (the live runs: test_task_load.py)."""

from __future__ import annotations

import numpy as np
import pytest

from generator.serving.contract import (
    BOXES,
    CLASSES,
    KEYPOINTS,
    MASK_SIZE,
    MASKS,
    NUM_DETECTIONS,
    ROTATED_BOXES,
    SCORES,
    TOP_CLASSES,
    TOP_SCORES,
)
from loadtest.errors import InferenceFailed
from loadtest.task_outputs import OutputBook, check_outputs


def _answer(count: int, extra: dict[str, np.ndarray] | None = None, padded: int = 4) -> dict[str, np.ndarray]:
    return {NUM_DETECTIONS: np.array([[count]], dtype=np.int32), BOXES: np.zeros((1, padded, 4), np.float32),
            SCORES: np.zeros((1, padded), np.float32), CLASSES: np.zeros((1, padded), np.int32), **(extra or {})}


def test_each_task_counts_what_its_detections_carry() -> None:
    pose = _answer(2, {KEYPOINTS: np.zeros((1, 4, 17, 3), np.float32)})
    assert check_outputs("pose", pose.get) == {"answers": 1, "detections": 2, "keypoints": 34}
    rotated = np.zeros((1, 4, 5), np.float32)
    rotated[0, :3, 2:4] = 5.0
    assert check_outputs("obb", _answer(3, {ROTATED_BOXES: rotated}).get)["rotated_boxes"] == 3
    masks = np.array([[b"ab", b"cd", b"", b""]], dtype=object)
    segment = _answer(2, {MASKS: masks, MASK_SIZE: np.array([[4, 4]], np.int32)})
    assert check_outputs("segment", segment.get)["masks"] == 2
    top = {TOP_CLASSES: np.array([[3, 1, 2]], np.int32), TOP_SCORES: np.ones((1, 3), np.float32)}
    assert check_outputs("classify", top.get) == {"answers": 1, "top_classes": 3}
    assert check_outputs("detect", _answer(0).get) == {"answers": 1, "detections": 0}


@pytest.mark.parametrize(("task", "answer", "message"), [
    ("pose", _answer(1), "carries no detection_keypoints output"),
    ("classify", _answer(1), "carries no top_classes, top_scores output"),
    ("detect", _answer(5), "num_detections 5 out of range 0..4"),
    ("segment", _answer(2, {MASKS: np.array([[b"ab", b"", b"", b""]], dtype=object),
                              MASK_SIZE: np.array([[4, 4]], np.int32)}), "came without its mask"),
    ("obb", _answer(1, {ROTATED_BOXES: np.zeros((1, 4, 5), np.float32)}), "positive size"),
])
def test_an_inconsistent_answer_fails_naming_the_problem(task: str, answer: dict, message: str) -> None:
    with pytest.raises(InferenceFailed, match=message):
        check_outputs(task, answer.get)


def test_a_workers_counts_reach_the_master_once() -> None:
    worker, master = OutputBook(), OutputBook()
    worker.count("pose", {"answers": 1, "detections": 2, "keypoints": 34})
    worker.count("pose", {"answers": 1, "detections": 0, "keypoints": 0})
    master.merge(worker.take_report())
    master.merge(worker.take_report())  # nothing new since the last report
    report = master.report()["pose"]
    assert (report["answers"], report["detections"], report["keypoints"]) == (2, 2, 34)
    assert report["per_answer"] == {"detections": 1.0, "keypoints": 17.0}


def test_a_two_stage_answer_counts_its_classified_boxes() -> None:
    from generator.serving.contract import BOX_CLASSES, BOX_SCORES
    from loadtest.task_outputs import check_two_stage

    scores = np.zeros((1, 2, 3), np.float32)
    scores[0, :2, 0] = 0.9
    answer = _answer(3, {BOX_CLASSES: np.zeros((1, 2, 3), np.int32), BOX_SCORES: scores})
    assert check_two_stage(answer.get) == {"answers": 1, "detections": 3, "classified_boxes": 2}  # the cap: 2 rows
    with pytest.raises(InferenceFailed, match="carries no detection_box_classes"):
        check_two_stage(_answer(1).get)
    scores[0, 1, 0] = 0.0
    with pytest.raises(InferenceFailed, match="without its classifier's scores"):
        check_two_stage(answer.get)
