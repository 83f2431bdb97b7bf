"""What the Locust users check and count in each answer, per Ultralytics task (``contract.TASK_OUTPUTS``).

A user learns its model's task from the model's metadata (the outputs it declares: ``clients.tasks``), requests
that task's outputs, and checks each answer: detections within the padding, a keypoint set per pose detection, a
rotated box per OBB detection, a non-empty mask per segmentation detection, the top classes of a classifier, the
classified boxes of a two-stage ensemble (``detect+classify``). The
counts are kept per process (a worker sends them to the master, which merges them, like the camera counts) and
reported in ``runinfo.json`` and ``summary.json`` (``outputs``). Kept apart from users.py, which imports Locust.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from generator.serving.contract import (
    BOX_CLASSES,
    BOX_SCORES,
    KEYPOINTS,
    MASKS,
    NUM_DETECTIONS,
    ROTATED_BOXES,
    SCORES,
    TASK_OUTPUTS,
    TOP_CLASSES,
)

from .errors import InferenceFailed

COUNTS = ("answers", "detections", "keypoints", "masks", "rotated_boxes", "top_classes", "classified_boxes")
TWO_STAGE = "detect+classify"  # the book's key for a two-stage ensemble's answers (build --classifier)


def check_outputs(task: str, output: Callable[[str], Any]) -> dict[str, int]:
    """The counts of one single-image answer of a ``task`` ensemble (``output(name)``: the tensor or None);
    ``InferenceFailed`` names what is missing or inconsistent."""
    missing = [name for name in TASK_OUTPUTS[task] if output(name) is None]
    if missing:
        raise InferenceFailed(f"the {task} response carries no {', '.join(missing)} output")
    if task == "classify":
        return {"answers": 1, "top_classes": int(np.asarray(output(TOP_CLASSES)).shape[-1])}
    count = int(np.asarray(output(NUM_DETECTIONS)).reshape(-1)[0])
    padded = int(np.asarray(output(SCORES)).shape[-1])
    if not 0 <= count <= padded:
        raise InferenceFailed(f"{NUM_DETECTIONS} {count} out of range 0..{padded}")
    counts = {"answers": 1, "detections": count}
    if task == "pose":
        points = np.asarray(output(KEYPOINTS))
        counts["keypoints"] = count * int(points.shape[-2])
    elif task == "obb":
        rotated = np.asarray(output(ROTATED_BOXES)).reshape(-1, padded, 5)[0, :count]
        if not np.isfinite(rotated).all() or (rotated[:, 2:4] <= 0).any():
            raise InferenceFailed("an OBB detection has no finite rotated box of positive size")
        counts["rotated_boxes"] = count
    elif task == "segment":
        masks = np.asarray(output(MASKS), dtype=object).reshape(-1)[:count]
        if any(not m for m in masks):
            raise InferenceFailed("a segmentation detection came without its mask")
        counts["masks"] = count
    return counts


def check_two_stage(output: Callable[[str], Any]) -> dict[str, int]:
    """The counts of one answer of a two-stage ensemble: its detections and how many of them were classified
    (the first min(num_detections, --classify-boxes) rows, each with its top classes)."""
    counts = check_outputs("detect", output)
    missing = [name for name in (BOX_CLASSES, BOX_SCORES) if output(name) is None]
    if missing:
        raise InferenceFailed(f"the two-stage response carries no {', '.join(missing)} output")
    scores = np.asarray(output(BOX_SCORES))
    rows = min(counts["detections"], int(scores.shape[-2]))
    classified = scores.reshape(-1, *scores.shape[-2:])[0, :rows]
    if rows and not (classified[:, 0] > 0).all():
        raise InferenceFailed("a classified box came without its classifier's scores")
    return {**counts, "classified_boxes": rows}


class OutputBook:
    """The counts of this process per task (a worker sends its share to the master, which merges them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, dict[str, int]] = {}
        self._unsent: dict[str, dict[str, int]] = {}

    def count(self, task: str, counts: dict[str, int]) -> None:
        with self._lock:
            for book in (self.counts, self._unsent):
                _add(book.setdefault(task, dict.fromkeys(COUNTS, 0)), counts)

    def merge(self, report: dict[str, dict[str, int]]) -> None:
        with self._lock:
            for task, counts in report.items():
                _add(self.counts.setdefault(task, dict.fromkeys(COUNTS, 0)), counts)

    def take_report(self) -> dict[str, dict[str, int]]:
        """What changed since the last report (a worker's share for the master)."""
        with self._lock:
            report = {task: dict(counts) for task, counts in self._unsent.items()}
            self._unsent.clear()
            return report

    def report(self) -> dict[str, dict[str, Any]]:
        """Per task: the totals and the mean per answer of each count the task has."""
        with self._lock:
            return {task: {**counts, "per_answer": {k: round(v / counts["answers"], 3) for k, v in counts.items()
                                                    if k != "answers" and v and counts["answers"]}}
                    for task, counts in self.counts.items()}


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + int(value)


BOOK = OutputBook()
