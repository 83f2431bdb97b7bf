"""Agreement of two versions on the same (mirrored) control images: matched detections, F1 at IoU 0.5.

The rollout sends every control image to both versions; a detection of one matches a detection of the other
with the same class and IoU >= ``iou`` (greedy, best score first). Agreement is 2 x matches / (all detections of
both), 1.0 when neither finds anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# One image's detections: boxes [n, 4] (x1, y1, x2, y2), scores [n], classes [n].
Detections = tuple[np.ndarray, np.ndarray, np.ndarray]


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64).reshape(-1, 4), np.asarray(b, dtype=np.float64).reshape(-1, 4)
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def matches(first: Detections, second: Detections, iou: float = 0.5) -> int:
    """Greedy one-to-one matches between two detection sets (same class, IoU >= ``iou``)."""
    boxes_a, scores_a, classes_a = first
    boxes_b, _, classes_b = second
    if len(scores_a) == 0 or len(classes_b) == 0:
        return 0
    overlap = iou_matrix(boxes_a, boxes_b)
    overlap[np.asarray(classes_a)[:, None] != np.asarray(classes_b)[None, :]] = 0.0
    taken = np.zeros(len(classes_b), dtype=bool)
    found = 0
    for row in np.argsort(-np.asarray(scores_a), kind="stable"):
        candidates = np.where(~taken & (overlap[row] >= iou))[0]
        if len(candidates):
            taken[candidates[np.argmax(overlap[row, candidates])]] = True
            found += 1
    return found


def agreement(stable: Sequence[Detections], canary: Sequence[Detections], iou: float = 0.5) -> float:
    if len(stable) != len(canary):
        raise ValueError(f"{len(stable)} stable results for {len(canary)} canary results")
    total = sum(len(s[1]) + len(c[1]) for s, c in zip(stable, canary, strict=True))
    if total == 0:
        return 1.0
    matched = sum(matches(s, c, iou) for s, c in zip(stable, canary, strict=True))
    return 2.0 * matched / total
