"""Post-processing of the pose, OBB and segmentation heads, batched and vectorised like the detection NMS (nms.py);
a classifier's top-k.

Both heads are v8 heads with rows after the class scores (generator.model.tasks): ``[N, 4 + nc + E, A]``.
What Ultralytics' predict does with them (ultralytics 8.4.190, ``utils/nms.py::non_max_suppression`` with
``nc`` given, then the task predictor's ``construct_result``), done here on the whole batch at once:

- pose: the best class per anchor above ``conf``, class-aware greedy NMS on the xyxy boxes (torchvision's), the
  keypoints (x, y already in input pixels, visibility already a probability) mapped back to source pixels and
  clipped to the image (``ops.scale_coords``);
- obb: the same candidates, then Fast-NMS on the rotated boxes with the probabilistic IoU (``TorchNMS.fast_nms``
  with ``batch_probiou``: a box is dropped when any higher-scored box of its class overlaps it, suppressed or
  not), and the rotated boxes mapped back unclipped (``ops.scale_boxes(xywh=True)``), the angle as the head
  gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .contract import KEYPOINTS, MASK_SIZE, MASKS, ROTATED_BOXES, TOP_CLASSES, TOP_SCORES
from .letterbox import boxes_to_source
from .masks import box_windows, encode_counts, source_masks, window_run_lengths
from .nms import COORDINATE_LIMIT, MAX_CANDIDATES, Detections, nms, postprocess

TASK_LAYOUTS = ("pose", "obb", "segment")
# Box pairs compared at once by the rotated NMS (about 100 bytes of float64 scratch each).
PAIR_CHUNK = 1 << 18


@dataclass(frozen=True)
class TaskDetections:
    """The detection outputs plus the task's own, padded alike (contract.TASK_OUTPUTS)."""

    detections: Detections
    extras: dict[str, np.ndarray]


@dataclass(frozen=True)
class HeadSpec:
    """How to split a task head: its class count and, for pose, its keypoint shape."""

    layout: str
    num_classes: int
    kpt_shape: tuple[int, int] | None = None
    top_k: int = 0  # classify: the classes returned per image


def head_spec(parameters: dict[str, str]) -> HeadSpec:
    """The post-processing step's HeadSpec from its config parameters (``layout``, ``num_classes``, ``kpt_shape``
    as "K,D", ``top_k``)."""
    kpt = parameters.get("kpt_shape")
    kpt_shape = (int(kpt.split(",")[0]), int(kpt.split(",")[1])) if kpt else None
    return HeadSpec(parameters["layout"], int(parameters.get("num_classes", "0")), kpt_shape,
                    int(parameters.get("top_k", "0")))


def top_classes(probabilities: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """A classifier's [N, nc] probabilities to its k best classes and their probabilities per image, best first
    (Ultralytics' ``Probs.top5``: a descending sort; equal probabilities, which torch's sort leaves in no promised
    order, keep the lower class first here). A row that is not finite fails its batch, like a broken detector
    output."""
    probabilities = probabilities.astype(np.float32, copy=False)
    if not np.isfinite(probabilities).all():
        raise ValueError("the classifier returned a non-finite probability")
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    return {TOP_CLASSES: order.astype(np.int32),
            TOP_SCORES: np.take_along_axis(probabilities, order, axis=1)}


@dataclass(frozen=True)
class _Candidates:
    image: np.ndarray  # int64 [K]
    xywh: np.ndarray  # float32 [K, 4], input pixels
    scores: np.ndarray  # float32 [K]
    classes: np.ndarray  # int64 [K]
    extra: np.ndarray  # float32 [K, E], the rows after the class scores


def _candidates(raw: np.ndarray, nc: int, conf_threshold: float) -> _Candidates:
    """Anchors whose best class score passes ``conf_threshold``, image-major; NaN/Inf rows dropped."""
    raw = raw.astype(np.float32, copy=False)
    with np.errstate(invalid="ignore"):
        image, anchor = np.nonzero(raw[:, 4:4 + nc, :].max(axis=1) > conf_threshold)
    rows = raw[image, :, anchor]  # [K, 4 + nc + E]
    classes = rows[:, 4:4 + nc].argmax(axis=-1)
    scores = np.take_along_axis(rows[:, 4:4 + nc], classes[:, None], axis=-1)[:, 0]
    finite = np.isfinite(rows).all(axis=-1)
    keep = _cap_per_image(image[finite], scores[finite])
    pick = np.flatnonzero(finite)[keep]
    return _Candidates(image[pick].astype(np.int64), rows[pick, :4], scores[pick], classes[pick].astype(np.int64),
                       rows[pick, 4 + nc:])


def _cap_per_image(image: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Indices of at most MAX_CANDIDATES best-scored candidates per image, in their original order."""
    if not len(scores) or np.bincount(image).max() <= MAX_CANDIDATES:
        return np.arange(len(scores))
    by_score = np.lexsort((-scores, image))
    rank = np.arange(len(by_score)) - np.searchsorted(image[by_score], image[by_score], side="left")
    return np.sort(by_score[rank < MAX_CANDIDATES])


def _covariance(xywhr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rotated boxes as Gaussians: the covariance entries (a, b, c) of [[a, c], [c, b]]."""
    a, b = xywhr[:, 2] ** 2 / 12, xywhr[:, 3] ** 2 / 12
    cos, sin = np.cos(xywhr[:, 4]), np.sin(xywhr[:, 4])
    return a * cos**2 + b * sin**2, a * sin**2 + b * cos**2, (a - b) * cos * sin


def probiou(first: np.ndarray, second: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """Probabilistic IoU of rotated boxes pair by pair (both [P, 5] xywhr): 1 - the Hellinger distance of
    their Gaussians (arXiv 2106.06072, the form Ultralytics' ``batch_probiou`` computes)."""
    a1, b1, c1 = _covariance(first)
    a2, b2, c2 = _covariance(second)
    dx, dy = first[:, 0] - second[:, 0], first[:, 1] - second[:, 1]
    a, b, c = a1 + a2, b1 + b2, c1 + c2
    det = a * b - c**2
    t1 = (a * dy**2 + b * dx**2) / (det + eps) * 0.25
    t2 = (c * -dx * dy) / (det + eps) * 0.5
    own = np.sqrt(np.clip(a1 * b1 - c1**2, 0, None) * np.clip(a2 * b2 - c2**2, 0, None))
    t3 = np.log(det / (4 * own + eps) + eps) * 0.5
    distance = np.clip(t1 + t2 + t3, eps, 100.0)
    return 1 - np.sqrt(1.0 - np.exp(-distance) + eps)


def rotated_nms(xywhr: np.ndarray, scores: np.ndarray, groups: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Fast-NMS within each group (image x class): keep a box unless a higher-scored box of its group overlaps it
    by more than ``iou_threshold``; returns the kept indices by score.

    Every pair of one group is compared at once: the pairs number the sum of the squared group sizes, not the
    square of the batch's candidates.
    """
    if len(scores) == 0:
        return np.zeros(0, dtype=np.int64)
    xywhr = np.clip(xywhr.astype(np.float64), -COORDINATE_LIMIT, COORDINATE_LIMIT)
    order = np.lexsort((np.arange(len(scores)), -scores, groups))  # group after group, each by score
    group = groups[order]
    starts = np.searchsorted(group, group, side="left")
    position = np.arange(len(order)) - starts  # rank within the group: the pairs it has with better boxes
    later = np.repeat(np.arange(len(order)), position)
    earlier = starts[later] + np.arange(len(later)) - np.repeat(np.cumsum(position) - position, position)
    sorted_boxes = xywhr[order]
    suppressed = np.zeros(len(order), dtype=bool)
    for start in range(0, len(later), PAIR_CHUNK):  # bounds the scratch: one crowded class can pair millions
        pairs = slice(start, start + PAIR_CHUNK)
        overlap = probiou(sorted_boxes[earlier[pairs]], sorted_boxes[later[pairs]]) > iou_threshold
        suppressed[later[pairs][overlap]] = True
    kept = order[~suppressed]
    return kept[np.argsort(-scores[kept], kind="stable")]


def _rotated_to_source(xywhr: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Rotated boxes from input to source pixels, unclipped (centre less the padding, sizes by the gains)."""
    out = xywhr.astype(np.float32, copy=True)
    out[:, 0:2] = (xywhr[:, 0:2] - params[:, 0:2]) / params[:, 2:4]
    out[:, 2:4] = xywhr[:, 2:4] / params[:, 2:4]
    return out


def _hull(xywhr: np.ndarray) -> np.ndarray:
    """The axis-aligned xyxy box around each rotated box."""
    cos, sin = np.abs(np.cos(xywhr[:, 4])), np.abs(np.sin(xywhr[:, 4]))
    half_w = (xywhr[:, 2] * cos + xywhr[:, 3] * sin) / 2
    half_h = (xywhr[:, 2] * sin + xywhr[:, 3] * cos) / 2
    return np.stack([xywhr[:, 0] - half_w, xywhr[:, 1] - half_h, xywhr[:, 0] + half_w, xywhr[:, 1] + half_h], -1)


def _keypoints_to_source(points: np.ndarray, params: np.ndarray) -> np.ndarray:
    """[K, P, D] keypoints from input to source pixels, clipped to the image; visibility untouched."""
    out = points.astype(np.float32, copy=True)
    out[..., 0:2] = (points[..., 0:2] - params[:, None, 0:2]) / params[:, None, 2:4]
    np.clip(out[..., 0:2], 0, params[:, None, 4:6], out=out[..., 0:2])
    return out


def _xyxy(xywh: np.ndarray) -> np.ndarray:
    half = xywh[:, 2:4] / 2
    return np.concatenate([xywh[:, 0:2] - half, xywh[:, 0:2] + half], axis=-1)


def _padded(batch: int, max_detections: int, image: np.ndarray, rank: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros((batch, max_detections, *values.shape[1:]), dtype=np.float32)
    out[image, rank] = values
    return out


def _segment_outputs(found: _Candidates, kept: np.ndarray, boxes: np.ndarray, protos: np.ndarray,
                     params: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """Each kept detection's mask as RLE; which detections have a mask at all (predict drops the empty ones)."""
    alive = np.zeros(len(kept), dtype=bool)
    encoded: list[bytes] = [b""] * len(kept)
    image = found.image[kept]
    for index in np.unique(image):
        rows = np.flatnonzero(image == index)
        source = (int(params[rows[0], 5]), int(params[rows[0], 4]))
        windows = source_masks(protos[index], found.extra[kept[rows]], boxes[rows], source)
        for row, window, (x1, y1, _, _) in zip(rows, windows, box_windows(boxes[rows], source), strict=True):
            alive[row] = window.any()
            encoded[row] = encode_counts(window_run_lengths(window, y1, x1, source)) if alive[row] else b""
    return alive, encoded


def _ranks(image: np.ndarray) -> np.ndarray:
    return np.arange(len(image)) - np.searchsorted(image, image, side="left")


def postprocess_task(raw: np.ndarray, spec: HeadSpec, letterbox_params: np.ndarray, conf_threshold: float,
                     iou_threshold: float, max_detections: int, protos: np.ndarray | None = None) -> TaskDetections:
    """A batch of raw heads of any layout to padded outputs in source pixels, with the task's own outputs
    (``protos``: a segmentation head's prototypes, [N, nm, mh, mw])."""
    if spec.layout not in TASK_LAYOUTS:
        return TaskDetections(postprocess(raw, spec.layout, letterbox_params, conf_threshold, iou_threshold,
                                          max_detections), {})
    batch, nc = raw.shape[0], spec.num_classes
    found = _candidates(raw, nc, conf_threshold)
    groups = found.image * nc + found.classes
    if spec.layout == "obb":
        xywhr = np.concatenate([found.xywh, found.extra[:, -1:]], axis=-1)
        kept = rotated_nms(xywhr, found.scores, groups, iou_threshold)
    else:
        kept = nms(_xyxy(found.xywh), found.scores, groups, iou_threshold)
    kept = kept[np.argsort(found.image[kept], kind="stable")]  # by image, then by score
    kept = kept[_ranks(found.image[kept]) < max_detections]
    params = letterbox_params[found.image[kept]]
    if spec.layout == "segment":
        assert protos is not None, "a segmentation head needs its prototypes"
        boxes = boxes_to_source(_xyxy(found.xywh[kept]), params)
        alive, encoded = _segment_outputs(found, kept, boxes, protos, params)
        kept, boxes, params = kept[alive], boxes[alive], params[alive]
        encoded = [e for e, a in zip(encoded, alive, strict=True) if a]
    image = found.image[kept]
    rank = _ranks(image)
    if spec.layout == "obb":
        rotated = _rotated_to_source(xywhr[kept], params)
        boxes = np.clip(_hull(rotated), 0, np.tile(params[:, 4:6], 2))
        extras = {ROTATED_BOXES: _padded(batch, max_detections, image, rank, rotated)}
    elif spec.layout == "pose":
        assert spec.kpt_shape is not None, "a pose head needs its kpt_shape"
        points = found.extra[kept].reshape(len(kept), *spec.kpt_shape)
        boxes = boxes_to_source(_xyxy(found.xywh[kept]), params)
        extras = {KEYPOINTS: _padded(batch, max_detections, image, rank, _keypoints_to_source(points, params))}
    else:
        masks = np.full((batch, max_detections), b"", dtype=object)
        column = np.empty(len(encoded), dtype=object)
        column[:] = encoded
        masks[image, rank] = column
        size = letterbox_params[:, [5, 4]].astype(np.int32)  # height, width
        extras = {MASKS: masks, MASK_SIZE: size}
    num = np.zeros((batch, 1), dtype=np.int32)
    np.add.at(num[:, 0], image, 1)
    classes = np.zeros((batch, max_detections), dtype=np.int32)
    classes[image, rank] = found.classes[kept]
    detections = Detections(num, _padded(batch, max_detections, image, rank, boxes),
                            _padded(batch, max_detections, image, rank, found.scores[kept]), classes)
    return TaskDetections(detections, extras)
