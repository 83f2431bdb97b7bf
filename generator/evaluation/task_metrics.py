"""Average precision over any similarity, and the similarities the task heads are measured with.

COCO's mAP@0.5:0.95 is a box-IoU measure; each task head has its own overlap, the one Ultralytics' validator uses
for it: the keypoints' OKS for pose (COCO's sigmas for the 17 body keypoints, equal ones otherwise, the area the
box's times 0.53), the probabilistic IoU of the rotated boxes for obb, the masks' IoU for segment. ``matched_ap``
is COCO's evaluation on a precomputed [predictions, ground truth] similarity per image: greedy matching per class
best score first, each prediction to the unmatched ground truth it overlaps most, at IoU thresholds 0.50:0.95, the
101-point interpolated precision, averaged over the classes that have ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from generator.serving.tasks import probiou

THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)
# COCO's per-keypoint sigmas of the 17 body keypoints (what Ultralytics' OKS_SIGMA holds).
COCO_KPT_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87,
                            0.87, 0.89, 0.89], dtype=np.float64) / 10.0
OKS_AREA_SCALE = 0.53  # Ultralytics: a person's segment covers about 0.53 of its box
VISIBLE = 0.5  # a reference keypoint counts when its visibility is at least this (what predict's plots draw)


@dataclass(frozen=True)
class Matchable:
    """One image's predictions against its ground truth: classes, prediction scores, similarity [P, G]."""

    pred_classes: np.ndarray
    scores: np.ndarray
    gt_classes: np.ndarray
    similarity: np.ndarray


def box_iou(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """IoU of every xyxy box of ``first`` [P, 4] with every one of ``second`` [G, 4]."""
    a, b = first.astype(np.float64)[:, None, :], second.astype(np.float64)[None, :, :]
    wh = np.clip(np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2]), 0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / np.maximum(area_a + area_b - inter, 1e-12)


def rotated_iou(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Probabilistic IoU of every xywhr box of ``first`` [P, 5] with every one of ``second`` [G, 5]."""
    p, g = len(first), len(second)
    if not p or not g:
        return np.zeros((p, g))
    pairs = probiou(np.repeat(first.astype(np.float64), g, axis=0), np.tile(second.astype(np.float64), (p, 1)))
    return np.asarray(pairs).reshape(p, g)


def oks(pred: np.ndarray, truth: np.ndarray, truth_boxes: np.ndarray) -> np.ndarray:
    """Object keypoint similarity of every prediction [P, K, D] with every ground truth [G, K, D] (xyxy boxes
    [G, 4] give the areas); ground truth keypoints below ``VISIBLE`` do not count (D = 2: all count), unless none
    is visible."""
    count = pred.shape[1] if pred.ndim == 3 else truth.shape[1]
    sigmas = COCO_KPT_SIGMAS if count == len(COCO_KPT_SIGMAS) else np.full(count, 1.0 / count)
    if not len(pred) or not len(truth):
        return np.zeros((len(pred), len(truth)))
    area = (truth_boxes[:, 2] - truth_boxes[:, 0]) * (truth_boxes[:, 3] - truth_boxes[:, 1]) * OKS_AREA_SCALE
    visible = truth[..., 2] >= VISIBLE if truth.shape[-1] == 3 else np.ones(truth.shape[:2], dtype=bool)
    d2 = ((pred[:, None, :, :2].astype(np.float64) - truth[None, :, :, :2]) ** 2).sum(-1)  # [P, G, K]
    e = d2 / ((2 * sigmas) ** 2 * (area[None, :, None] + 1e-9) * 2)
    # A reference detection with no visible keypoint (its score below VISIBLE) is compared on all of them: its
    # keypoints are still served, and COCO's box-distance fallback for such ground truth has no meaning here.
    visible = np.where(visible.any(axis=1, keepdims=True), visible, True)
    counted = visible[None].astype(np.float64)
    return (np.exp(-e) * counted).sum(-1) / np.maximum(counted.sum(-1), 1e-9)


def _matches(item: Matchable, threshold: float) -> np.ndarray:
    """Whether each prediction (any order) matched a ground truth of its class at ``threshold``."""
    matched = np.zeros(len(item.scores), dtype=bool)
    taken = np.zeros(len(item.gt_classes), dtype=bool)
    for p in np.argsort(-item.scores, kind="stable"):
        candidates = (item.gt_classes == item.pred_classes[p]) & ~taken
        if not candidates.any():
            continue
        overlap = np.where(candidates, item.similarity[p], -1.0)
        best = int(overlap.argmax())
        if overlap[best] >= threshold:
            matched[p], taken[best] = True, True
    return matched


def _average_precision(hits: np.ndarray, scores: np.ndarray, truths: int) -> float:
    if not len(hits):
        return 0.0
    order = np.argsort(-scores, kind="stable")
    tp = np.cumsum(hits[order])
    fp = np.cumsum(~hits[order])
    recall = tp / truths
    precision = np.maximum.accumulate((tp / np.maximum(tp + fp, 1e-12))[::-1])[::-1]
    where = np.searchsorted(recall, RECALL_POINTS, side="left")
    return float(np.where(where < len(precision), precision[np.minimum(where, len(precision) - 1)], 0.0).mean())


def matched_ap(items: Sequence[Matchable]) -> tuple[float, float]:
    """mAP@0.5:0.95 and mAP@0.5 over ``items`` (one per image): 0.0 when there is no ground truth."""
    gt = np.concatenate([i.gt_classes for i in items]) if items else np.zeros(0, np.int64)
    classes = np.unique(gt)
    if not len(classes):
        return 0.0, 0.0
    pred_classes = np.concatenate([i.pred_classes for i in items])
    scores = np.concatenate([i.scores for i in items])
    per_threshold = []
    for threshold in THRESHOLDS:
        hits = np.concatenate([_matches(i, float(threshold)) for i in items])
        per_threshold.append(np.mean([
            _average_precision(hits[pred_classes == c], scores[pred_classes == c], int((gt == c).sum()))
            for c in classes]))
    return float(np.mean(per_threshold)), float(per_threshold[0])
