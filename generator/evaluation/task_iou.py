"""The overlap of labels and predictions per task, each [L, P]: box IoU, mask IoU on COCO RLE, keypoint OKS and
rotated-box IoU (Ultralytics' probabilistic IoU, and the exact polygon IoU).

Masks stay run-length encoded: faster-coco-eval (pycocotools' mask API) intersects the runs without decoding a
source-sized image per detection. OKS is COCO's as Ultralytics computes it (``utils.metrics.kpt_iou``): the
label box's area times 0.53 as the object scale, COCO's per-keypoint sigmas for a 17-keypoint person and
1/K for any other keypoint shape, labelled keypoints only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from generator.serving.tasks import probiou

# COCO's keypoint sigmas (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles).
COCO_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87,
                        0.89, 0.89]) / 10.0
AREA_SCALE = 0.53  # Ultralytics' object area for OKS: the label box's area times this
EPS = 1e-7


def box_iou(labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """IoU of [L, 4] and [P, 4] xyxy boxes."""
    top_left = np.maximum(labels[:, None, :2], predictions[None, :, :2])
    bottom_right = np.minimum(labels[:, None, 2:], predictions[None, :, 2:])
    inter = np.clip(bottom_right - top_left, 0, None).prod(axis=-1)
    area_l = (labels[:, 2:] - labels[:, :2]).prod(axis=-1)
    area_p = (predictions[:, 2:] - predictions[:, :2]).prod(axis=-1)
    return inter / (area_l[:, None] + area_p[None, :] - inter + EPS)


def mask_iou(labels: Sequence[dict[str, Any]], predictions: Sequence[dict[str, Any]]) -> np.ndarray:
    """IoU of COCO RLE masks ({"size": [h, w], "counts": bytes}), labels against predictions."""
    if not labels or not predictions:
        return np.zeros((len(labels), len(predictions)))
    from faster_coco_eval.core import mask

    return np.asarray(mask.iou(list(predictions), list(labels), [0] * len(labels)), dtype=np.float64).T


def keypoint_sigmas(kpt_shape: tuple[int, int]) -> np.ndarray:
    return COCO_SIGMAS if tuple(kpt_shape) == (17, 3) else np.full(kpt_shape[0], 1.0 / kpt_shape[0])


def oks(labels: np.ndarray, predictions: np.ndarray, label_boxes: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """Object keypoint similarity of [L, K, D] labelled and [P, K, D'] predicted keypoints; a labelled keypoint
    counts when its visibility is not 0 (every one when the labels carry none)."""
    area = (label_boxes[:, 2:] - label_boxes[:, :2]).prod(axis=-1) * AREA_SCALE
    distance = ((labels[:, None, :, :2] - predictions[None, :, :, :2]) ** 2).sum(axis=-1)  # [L, P, K]
    scaled = distance / ((2 * sigmas) ** 2 * (area[:, None, None] + EPS) * 2)
    labelled = labels[..., 2] != 0 if labels.shape[-1] > 2 else np.ones(labels.shape[:2], dtype=bool)
    return (np.exp(-scaled) * labelled[:, None]).sum(axis=-1) / (labelled.sum(axis=-1)[:, None] + EPS)


def rotated_probiou(labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """Ultralytics' OBB validation overlap: the probabilistic IoU of [L, 5] and [P, 5] xywhr boxes."""
    rows, columns = np.meshgrid(np.arange(len(labels)), np.arange(len(predictions)), indexing="ij")
    pairs = probiou(labels[rows.ravel()].astype(np.float64), predictions[columns.ravel()].astype(np.float64))
    return pairs.reshape(len(labels), len(predictions))


def corners(xywhr: np.ndarray) -> np.ndarray:
    """[N, 4, 2] corners of rotated boxes, in order around the box."""
    cos, sin = np.cos(xywhr[:, 4]), np.sin(xywhr[:, 4])
    half_w = np.stack([cos, sin], axis=-1) * xywhr[:, 2:3] / 2
    half_h = np.stack([-sin, cos], axis=-1) * xywhr[:, 3:4] / 2
    centre = xywhr[:, :2]
    return np.stack([centre + half_w + half_h, centre + half_w - half_h, centre - half_w - half_h,
                     centre - half_w + half_h], axis=1)


def rotated_iou(labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The exact IoU of [L, 5] and [P, 5] xywhr boxes: the area of their intersection polygon. Only the pairs
    whose axis-aligned hulls overlap are intersected."""
    out = np.zeros((len(labels), len(predictions)))
    if not len(labels) or not len(predictions):
        return out
    label_corners, pred_corners = corners(labels).astype(np.float32), corners(predictions).astype(np.float32)
    lo_l, hi_l = label_corners.min(axis=1), label_corners.max(axis=1)
    lo_p, hi_p = pred_corners.min(axis=1), pred_corners.max(axis=1)
    touching = ((np.minimum(hi_l[:, None], hi_p[None]) - np.maximum(lo_l[:, None], lo_p[None])) > 0).all(axis=-1)
    area_l, area_p = labels[:, 2] * labels[:, 3], predictions[:, 2] * predictions[:, 3]
    for i, j in zip(*np.nonzero(touching), strict=True):
        inter, _ = cv2.intersectConvexConvex(label_corners[i], pred_corners[j])
        out[i, j] = inter / (area_l[i] + area_p[j] - inter + EPS)
    return out
