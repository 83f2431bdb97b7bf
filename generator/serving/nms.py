"""Decode YOLO heads and run class-aware NMS on a whole batch at once.

Supported head layouts (batch first):
- ``v8``: [N, 4 + nc, A] -- cx, cy, w, h in input pixels, then per-class scores (YOLOv8/11/12).
- ``v8_reduced``: [N, 6, A] -- cx, cy, w, h, best class score, best class id (as a float): a v8 head whose
  class max/arg-max the served graph already took (generator.builder.stages.graph.suffix). Never inferred from a shape:
  [N, 6, A] is also a genuine two-class v8 head.
- ``v5``: [N, A, 5 + nc] -- cx, cy, w, h, objectness, per-class scores (YOLOv5/v7).
- ``end2end``: [N, K, 6] -- x1, y1, x2, y2, score, class; already NMS-free (YOLOv10/26 end-to-end).
- ``graph_nms``: [N, max_det, 6] -- the same rows from a served graph that ran NMS itself
  (generator.builder.stages.graph.nms), sorted by score, zero rows past each image's count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .contract import LAYOUTS
from .letterbox import boxes_to_source

# Rows already suppressed: x1, y1, x2, y2, score, class.
_NMS_FREE = ("end2end", "graph_nms")
# Candidates kept per image before NMS; bounds the work on images with thousands of weak boxes.
MAX_CANDIDATES = 4096
# Far beyond any network input (at most 8192 px); coordinates past it are garbage from a broken head.
COORDINATE_LIMIT = 1e5


@dataclass(frozen=True)
class Detections:
    """Padded batch outputs in the ensemble's contract (contract.py; README, "The ensemble contract")."""

    num_detections: np.ndarray  # int32 [N, 1]
    boxes: np.ndarray  # float32 [N, max_det, 4], x1 y1 x2 y2 in source pixels
    scores: np.ndarray  # float32 [N, max_det]
    classes: np.ndarray  # int32 [N, max_det]


def _xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    half = xywh[..., 2:4] / 2
    return np.concatenate([xywh[..., 0:2] - half, xywh[..., 0:2] + half], axis=-1)


@dataclass(frozen=True)
class Candidates:
    """Anchors above the score threshold, flattened over the batch (image-major, anchor order)."""

    image: np.ndarray  # int64 [K]
    boxes: np.ndarray  # float32 [K, 4], x1 y1 x2 y2 in input pixels
    scores: np.ndarray  # float32 [K]
    classes: np.ndarray  # int64 [K]


def _best_scores(raw: np.ndarray, layout: str) -> np.ndarray:
    """Best class score per anchor, [N, A]; NaN when any class score of the anchor is NaN."""
    if layout == "v8":
        return raw[:, 4:, :].max(axis=1)
    if layout == "v8_reduced":
        return raw[:, 4, :]
    if layout == "v5":
        return (raw[..., 5:] * raw[..., 4:5]).max(axis=-1)
    return raw[..., 4]


def boxes_and_best_scores(raw: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-anchor boxes as the head encodes them, [N, A, 4], and best class scores, [N, A].

    What decides the detections, and the same for a v8 head and its ``v8_reduced`` form: lets the
    accuracy gate compare a served graph with the reference whatever the served layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown head layout {layout!r}; expected one of {LAYOUTS}")
    raw = raw.astype(np.float32, copy=False)
    boxes = raw[:, :4, :].transpose(0, 2, 1) if layout in ("v8", "v8_reduced") else raw[..., :4]
    return boxes, _best_scores(raw, layout)


def decode_head(raw: np.ndarray, layout: str, conf_threshold: float) -> Candidates:
    """Decode only the anchors whose best class score passes ``conf_threshold`` (NaN/Inf dropped).

    The best score per anchor is a plain max reduction over the whole head (``v8_reduced``: the served
    graph took it); the arg-max class and the box conversion then run on the few candidates, not on every
    anchor of every image.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown head layout {layout!r}; expected one of {LAYOUTS}")
    raw = raw.astype(np.float32, copy=False)
    best = _best_scores(raw, layout)  # [N, A]
    with np.errstate(invalid="ignore"):
        image, anchor = np.nonzero(best > conf_threshold)
    if layout in ("v8", "v8_reduced"):
        rows = raw[image, :, anchor]  # [K, 4 + nc] or [K, 6]
        class_scores = rows[:, 4:] if layout == "v8" else None
        boxes = _xywh_to_xyxy(rows[:, :4])
    elif layout == "v5":
        rows = raw[image, anchor]
        class_scores = rows[:, 5:] * rows[:, 4:5]
        boxes = _xywh_to_xyxy(rows[:, :4])
    else:
        rows = raw[image, anchor]
        boxes, class_scores = rows[:, :4], None
    if class_scores is not None:
        classes = class_scores.argmax(axis=-1)
        scores = np.take_along_axis(class_scores, classes[:, None], axis=-1)[:, 0]
    else:  # end2end and v8_reduced carry score and class id in rows 4 and 5
        scores = rows[:, 4]
        classes = np.nan_to_num(rows[:, 5], nan=-1.0).astype(np.int64)
    finite = np.isfinite(scores) & np.isfinite(boxes).all(axis=-1) & (classes >= 0)
    return Candidates(image[finite].astype(np.int64), boxes[finite], scores[finite], classes[finite].astype(np.int64))


def nms(boxes: np.ndarray, scores: np.ndarray, groups: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS where boxes only suppress boxes of the same group; returns kept indices by score.

    Groups (image x class) are independent, so every group advances at once: each pass keeps the best remaining
    box of every group and drops the boxes of its group that overlap it. The passes number the most boxes one
    group keeps, not the boxes the whole batch keeps (a batch of 32 images of 80 classes: tens, not thousands),
    and the result is the one-box-at-a-time greedy order's: within a group, by score, ties by index.
    """
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.int64)
    # Bound the coordinates: a broken head's absurd box (say 1e20) must not turn every area into inf.
    boxes = np.clip(boxes.astype(np.float64), -COORDINATE_LIMIT, COORDINATE_LIMIT)
    order = np.argsort(-scores, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    by_group = np.lexsort((rank, groups))  # group after group, each in score order
    group = np.asarray(groups)[by_group]
    x1, y1, x2, y2 = boxes[by_group].T
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    alive = np.ones(len(by_group), dtype=bool)
    kept = np.zeros(len(by_group), dtype=bool)
    while True:
        live = np.flatnonzero(alive)
        if live.size == 0:
            break
        live_group = group[live]
        first = np.empty(live.size, dtype=bool)
        first[0], first[1:] = True, live_group[1:] != live_group[:-1]
        leaders, rest = live[first], live[~first]
        kept[leaders] = True
        alive[leaders] = False
        if rest.size == 0:
            break
        lead = leaders[np.searchsorted(group[leaders], group[rest])]  # each remaining box's group leader
        w = np.maximum(0.0, np.minimum(x2[lead], x2[rest]) - np.maximum(x1[lead], x1[rest]))
        h = np.maximum(0.0, np.minimum(y2[lead], y2[rest]) - np.maximum(y1[lead], y1[rest]))
        inter = w * h
        iou = inter / np.maximum(areas[lead] + areas[rest] - inter, 1e-9)
        alive[rest[iou > iou_threshold]] = False
    chosen = by_group[kept]
    return chosen[np.argsort(rank[chosen])]


def postprocess(
    raw: np.ndarray,
    layout: str,
    letterbox_params: np.ndarray,
    conf_threshold: float,
    iou_threshold: float,
    max_detections: int,
) -> Detections:
    """Turn a batch of raw head outputs into padded detections in source-image pixels.

    ``letterbox_params`` is [N, 6] as produced by preprocess (``Letterbox.as_array``).
    """
    batch = raw.shape[0]
    found = decode_head(raw, layout, conf_threshold)
    image_idx, cand_boxes, cand_scores, cand_classes = found.image, found.boxes, found.scores, found.classes
    if len(cand_scores) and np.bincount(image_idx).max() > MAX_CANDIDATES:
        # Cap per image, not per batch, so a busy image cannot push out its neighbours' boxes; the stable
        # sort breaks ties by anchor, and sorting the kept indices restores the image-major order.
        by_score = np.lexsort((-cand_scores, image_idx))
        rank = np.arange(len(by_score)) - np.searchsorted(image_idx[by_score], image_idx[by_score], side="left")
        top = np.sort(by_score[rank < MAX_CANDIDATES])
        image_idx, cand_boxes = image_idx[top], cand_boxes[top]
        cand_scores, cand_classes = cand_scores[top], cand_classes[top]

    if layout in _NMS_FREE:
        kept = np.lexsort((-cand_scores, image_idx))  # already suppressed by the model
    else:
        num_classes = int(cand_classes.max()) + 1 if len(cand_classes) else 1
        kept = nms(cand_boxes, cand_scores, image_idx * num_classes + cand_classes, iou_threshold)
        kept = kept[np.argsort(image_idx[kept], kind="stable")]  # by image, then by score

    out = Detections(
        num_detections=np.zeros((batch, 1), dtype=np.int32),
        boxes=np.zeros((batch, max_detections, 4), dtype=np.float32),
        scores=np.zeros((batch, max_detections), dtype=np.float32),
        classes=np.zeros((batch, max_detections), dtype=np.int32),
    )
    kept_images = image_idx[kept]
    # Rank of each kept box within its image; anything past max_detections is dropped.
    starts = np.searchsorted(kept_images, kept_images, side="left")
    rank = np.arange(len(kept)) - starts
    capped = rank < max_detections
    kept, kept_images, rank = kept[capped], kept_images[capped], rank[capped]
    out.boxes[kept_images, rank] = boxes_to_source(cand_boxes[kept], letterbox_params[kept_images])
    out.scores[kept_images, rank] = cand_scores[kept]
    out.classes[kept_images, rank] = cand_classes[kept]
    np.add.at(out.num_detections[:, 0], kept_images, 1)
    return out
