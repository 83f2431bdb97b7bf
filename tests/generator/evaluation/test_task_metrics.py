"""The task metrics of ``generator validate`` on hand-made cases whose answer is known, and against Ultralytics'
own validation metrics on the same predictions and labels (``tests/fixtures/ultralytics/metrics.json``)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from faster_coco_eval.core import mask

from generator.errors import GeneratorError
from generator.evaluation.task_ap import ApAccumulator, average_precision, match_predictions
from generator.evaluation.task_iou import (
    COCO_SIGMAS,
    box_iou,
    keypoint_sigmas,
    mask_iou,
    oks,
    rotated_iou,
    rotated_probiou,
)
from generator.evaluation.task_validation import TaskPrediction, score
from generator.evaluation.yolo_labels import labels_folder, read_labels
from tests.fixtures.ultralytics.metrics import METRICS, labels_digest
from tests.fixtures.ultralytics.predict import SCENES, TASK_FIXTURES, recorded_predictions, runs_to_mask
from tests.fixtures.ultralytics.task_labels import LABELS, MAX_OBJECTS


def _rle(height: int, width: int, rows: slice, columns: slice) -> dict:
    pixels = np.zeros((height, width), dtype=np.uint8, order="F")
    pixels[rows, columns] = 1
    return mask.encode(pixels)


def test_each_prediction_claims_one_label_best_score_first() -> None:
    # two predictions overlap the one label; the better-scored (listed first) takes it at every threshold it
    # passes (0.5 to 0.9), the other only at 0.95, which the first does not reach
    overlap = np.array([[0.9, 0.95]])
    hits = match_predictions(overlap, np.array([0]), np.array([0, 0]))
    assert hits[0].tolist() == [True] * 9 + [False] and hits[1].tolist() == [False] * 9 + [True]
    # a prediction of another class never matches, whatever the overlap
    assert not match_predictions(np.array([[1.0]]), np.array([1]), np.array([0])).any()
    # an overlap of 0.72 counts at 0.5, 0.55, 0.6, 0.65 and 0.7, not above
    assert match_predictions(np.array([[0.72]]), np.array([0]), np.array([0]))[0].tolist() == [True] * 5 + [False] * 5


def test_average_precision_of_known_curves() -> None:
    # Ultralytics' curve steps down to 0 at the highest recall reached, that point included: a perfect curve
    # loses the last of the 101 points' trapezoids (0.005), as ``yolo val`` reports it
    assert average_precision(np.array([0.5, 1.0]), np.array([1.0, 1.0])) == pytest.approx(0.995, abs=1e-12)
    # half the labels found at precision 1, nothing after: 1 up to recall 0.49, then the step
    assert average_precision(np.array([0.5]), np.array([1.0])) == pytest.approx(0.495, abs=1e-12)
    accumulator = ApAccumulator()
    # a false positive scored above the true one: precision 1/2 at recall 1
    accumulator.add(np.array([[0.0, 1.0]]), np.array([0]), np.array([0.9, 0.8]), np.array([0, 0]))
    assert accumulator.result().map50_95 == pytest.approx(0.5, abs=0.01)


def test_box_and_mask_iou_of_rectangles() -> None:
    assert box_iou(np.array([[0.0, 0, 4, 4]]), np.array([[2.0, 0, 6, 4]]))[0, 0] == pytest.approx(8 / 24)
    label, prediction = _rle(20, 30, slice(0, 10), slice(0, 10)), _rle(20, 30, slice(5, 15), slice(0, 10))
    np.testing.assert_allclose(mask_iou([label], [prediction, label]), [[50 / 150, 1.0]])
    assert mask_iou([], [label]).shape == (0, 1)


def test_oks_is_one_on_the_labels_and_falls_as_cocos_formula() -> None:
    labels = np.zeros((1, 17, 3))
    labels[0, :, :2] = np.arange(34).reshape(17, 2) * 3
    labels[0, :, 2] = 2
    labels[0, 0, 2] = 0  # an unlabelled keypoint counts for nothing, wherever it is predicted
    box = np.array([[0.0, 0, 100, 100]])
    moved = labels.copy()
    moved[0, 1:, 0] += 5
    moved[0, 0, :2] += 1000
    expected = np.exp(-25 / ((2 * COCO_SIGMAS[1:]) ** 2 * 100 * 100 * 0.53 * 2)).mean()
    np.testing.assert_allclose(oks(labels, np.concatenate([labels, moved]), box, COCO_SIGMAS), [[1.0, expected]],
                               atol=1e-6)
    assert keypoint_sigmas((5, 3)).tolist() == [0.2] * 5 and keypoint_sigmas((17, 2)).tolist() == [1 / 17] * 17


def test_rotated_iou_is_the_polygon_overlap() -> None:
    square = np.array([[0.0, 0, 2, 2, 0]])
    turned = np.array([[0.0, 0, 2, 2, math.pi / 4], [0.0, 0, 2, 2, math.pi / 2], [10.0, 0, 2, 2, 0.3],
                       [1.0, 0, 2, 2, 0]])
    octagon = 8 * (math.sqrt(2) - 1)  # a square and itself turned by 45 degrees share a regular octagon
    np.testing.assert_allclose(rotated_iou(square, turned)[0], [octagon / (8 - octagon), 1.0, 0.0, 2 / 6],
                               atol=1e-4)
    same = rotated_probiou(square, turned)[0]
    assert same[1] == pytest.approx(1.0, abs=1e-3) and same[2] < 1e-3


def test_yolo_labels_in_pixels(tmp_path: Path) -> None:
    (tmp_path / "seg.txt").write_text("3 0.1 0.1 0.5 0.1 0.5 0.5\n\n")
    (tmp_path / "obb.txt").write_text("1 0.1 0.1 0.5 0.1 0.5 0.3 0.1 0.3\n")
    (tmp_path / "pose.txt").write_text("0 0.5 0.5 0.2 0.4 0.5 0.25 0.5 0.75\n")
    segment = read_labels(tmp_path / "seg.txt", "segment", (200, 100))
    assert segment.classes.tolist() == [3] and segment.boxes.tolist() == [[20, 10, 100, 50]]
    assert segment.masks is not None and int(mask.area(segment.masks[0])) == pytest.approx(80 * 40 / 2, rel=0.05)
    obb = read_labels(tmp_path / "obb.txt", "obb", (200, 100))
    assert obb.rotated is not None and sorted(obb.rotated[0, 2:4].tolist()) == pytest.approx([20, 80])
    assert obb.rotated[0, :2].tolist() == pytest.approx([60, 20])
    pose = read_labels(tmp_path / "pose.txt", "pose", (200, 100), (2, 3))
    assert pose.boxes.tolist() == [[80, 30, 120, 70]]
    assert pose.keypoints is not None and pose.keypoints[0].tolist() == [[100, 25, 2], [100, 75, 2]]
    assert len(read_labels(tmp_path / "none.txt", "obb", (200, 100)).classes) == 0  # a background image


@pytest.mark.parametrize(("task", "line", "message"), [
    ("segment", "0 0.1 0.2 0.3 0.4", "polygon of 3 points or more, got 4"),
    ("obb", "0 0.1 0.2", "4 corners (8 numbers), got 2"),
    ("pose", "0 0.5 0.5 0.1 0.1 0.2", "2 keypoints of 2 or 3 numbers"),
    ("obb", "x 0.1", "not numbers"),
    ("obb", "1.5 0 0 0 0 0 0 0 0", "is not an index"),
])
def test_a_bad_label_line_is_named_in_one_line(tmp_path: Path, task: str, line: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(f"0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.5\n{line}\n" if task == "obb" else f"{line}\n")
    with pytest.raises(GeneratorError, match=re.escape(message)) as error:
        read_labels(path, task, (10, 10), (2, 3))
    assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_labels_default_to_ultralytics_sibling_folder(tmp_path: Path) -> None:
    assert labels_folder(tmp_path / "data" / "images" / "val", None) == (tmp_path / "data" / "labels" / "val").resolve()
    with pytest.raises(GeneratorError, match="pass --labels DIR"):
        labels_folder(tmp_path / "val", None)


def _recorded(key: str, task: str) -> tuple[list, list[TaskPrediction]]:
    labels, predictions = [], []
    for index, ((_, width, height), entry) in enumerate(zip(SCENES, recorded_predictions()["models"][key]["images"],
                                                            strict=True)):
        labels.append(read_labels(LABELS / key / f"scene_{index}.txt", task, (width, height), (17, 3)))
        n = min(len(entry["scores"]), MAX_OBJECTS)
        scores, classes = np.array(entry["scores"][:n]), np.array(entry["classes"][:n])
        if task == "obb":
            predictions.append(TaskPrediction(np.zeros((n, 4)), scores, classes,
                                              rotated=np.array(entry["rotated_boxes"][:n]).reshape(-1, 5)))
            continue
        boxes = np.array(entry["boxes"][:n]).reshape(-1, 4)
        if task == "pose":
            predictions.append(TaskPrediction(boxes, scores, classes,
                                              keypoints=np.array(entry["keypoints"][:n]).reshape(-1, 17, 3)))
        else:
            masks = [mask.encode(np.asfortranarray(runs_to_mask(r, height, width).astype(np.uint8)))
                     for r in entry["mask_runs"][:n]]
            predictions.append(TaskPrediction(boxes, scores, classes, masks=masks))
    return labels, predictions


@pytest.mark.parametrize("key", [k for k, task in TASK_FIXTURES.items() if task != "classify"])
def test_scores_equal_ultralytics_metrics_on_the_same_predictions(key: str) -> None:
    reference = json.loads(METRICS.read_text())["models"][key]
    assert reference["labels_sha256"] == labels_digest(key), "labels changed: run tests/fixtures/ultralytics/metrics.py"
    assert reference["fixture_sha256"] == recorded_predictions()["models"][key]["fixture_sha256"]
    task = reference["task"]
    found = score(task, *_recorded(key, task), kpt_shape=(17, 3))
    for name, (map50_95, map50) in reference["metrics"].items():
        assert 0.1 < map50_95 < 0.9, f"{key} {name}: the labels should leave the mAP inside (0, 1)"
        assert found.metrics[name].map50_95 == pytest.approx(map50_95, abs=1e-9), name
        assert found.metrics[name].map50 == pytest.approx(map50, abs=1e-9), name
    if task == "obb":  # the exact overlap of the same boxes: no Ultralytics counterpart, never above probiou's here
        assert 0 < found.metrics["obb_polygon"].map50_95 < found.metrics["obb"].map50_95
