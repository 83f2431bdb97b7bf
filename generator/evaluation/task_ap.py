"""Average precision over IoU thresholds 0.5:0.95, for any overlap measure (mask IoU, OKS, rotated IoU).

The matching and the AP are Ultralytics' validators' (ultralytics 8.4.190, ``BaseValidator.match_predictions``
and ``utils.metrics.ap_per_class``), so ``generator validate`` reports what ``yolo val`` would on the same
predictions: detections in descending score each claim the best unclaimed label of their class per threshold;
AP is the 101-point interpolated area under each class's precision-recall curve; mAP is the mean over the classes
that have labels. Only the overlap matrix differs between tasks (generator.evaluation.task_iou).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from generator.evaluation.accuracy import MapResult

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
_RECALL_POINTS = np.linspace(0.0, 1.0, 101)


def match_predictions(overlap: np.ndarray, label_classes: np.ndarray, pred_classes: np.ndarray) -> np.ndarray:
    """[P, 10] hits of ``pred_classes`` (best score first) against labels, from the [L, P] ``overlap``."""
    hits = np.zeros((len(pred_classes), len(IOU_THRESHOLDS)), dtype=bool)
    if not len(label_classes) or not len(pred_classes):
        return hits
    overlap = np.where(label_classes[:, None] == pred_classes[None, :], overlap, 0.0)
    claimed = np.zeros((len(label_classes), len(IOU_THRESHOLDS)), dtype=bool)
    columns = np.arange(len(IOU_THRESHOLDS))
    for j in np.flatnonzero((overlap >= IOU_THRESHOLDS[0]).any(axis=0)):
        free = np.where(claimed, 0.0, overlap[:, j, None])  # [L, 10]: each label's overlap while unclaimed
        best = free.argmax(axis=0)
        hits[j] = free[best, columns] >= IOU_THRESHOLDS
        claimed[best, columns] |= hits[j]
    return hits


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """101-point interpolated AP (COCO's) of one precision-recall curve, its precision made monotone and zero
    past the highest recall reached (a step down there, not a slope to recall 1)."""
    recall = np.concatenate(([0.0], recall, [recall[-1] if len(recall) else 1.0], [1.0]))
    precision = np.concatenate(([1.0], precision, [0.0], [0.0]))
    precision = np.flip(np.maximum.accumulate(np.flip(precision)))
    curve = np.interp(_RECALL_POINTS, recall, precision)
    return float(np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(_RECALL_POINTS)))


def mean_average_precision(hits: np.ndarray, scores: np.ndarray, pred_classes: np.ndarray,
                           label_classes: np.ndarray) -> MapResult:
    """mAP@0.5:0.95 and mAP@0.5 over the labelled classes, from every image's hits put together."""
    classes, counts = np.unique(label_classes, return_counts=True)
    if not len(classes):
        return MapResult(0.0, 0.0)
    order = np.argsort(-scores, kind="stable")
    hits, pred_classes = hits[order].astype(np.float64), pred_classes[order]
    ap = np.zeros((len(classes), len(IOU_THRESHOLDS)))
    for row, (cls, labels) in enumerate(zip(classes, counts, strict=True)):
        mine = pred_classes == cls
        if not mine.any():
            continue
        true_pos = hits[mine].cumsum(axis=0)
        false_pos = (1 - hits[mine]).cumsum(axis=0)
        recall, precision = true_pos / (labels + 1e-16), true_pos / (true_pos + false_pos)
        ap[row] = [average_precision(recall[:, t], precision[:, t]) for t in range(len(IOU_THRESHOLDS))]
    return MapResult(float(ap.mean()), float(ap[:, 0].mean()))


@dataclass
class ApAccumulator:
    """Collects each image's hits, then gives the mAP over all of them."""

    hits: list[np.ndarray] = field(default_factory=list)
    scores: list[np.ndarray] = field(default_factory=list)
    pred_classes: list[np.ndarray] = field(default_factory=list)
    label_classes: list[np.ndarray] = field(default_factory=list)

    def add(self, overlap: np.ndarray, label_classes: np.ndarray, scores: np.ndarray,
            pred_classes: np.ndarray) -> None:
        """One image: the [L, P] overlap of its labels and its predictions (in any order)."""
        order = np.argsort(-scores, kind="stable")
        overlap = overlap[:, order] if overlap.size else np.zeros((len(label_classes), len(order)))
        self.hits.append(match_predictions(overlap, label_classes, pred_classes[order]))
        self.scores.append(scores[order])
        self.pred_classes.append(pred_classes[order])
        self.label_classes.append(label_classes)

    def result(self) -> MapResult:
        if not self.hits:
            return MapResult(0.0, 0.0)
        return mean_average_precision(np.concatenate(self.hits), np.concatenate(self.scores),
                                      np.concatenate(self.pred_classes), np.concatenate(self.label_classes))
