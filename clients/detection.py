"""Result types and the decoding of the ensemble's padded output tensors into them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from clients.errors import ClientError
from clients.tasks import task_fields, top_classes
from generator.serving.contract import (
    BOX_CLASSES,
    BOX_SCORES,
    BOXES,
    CLASS_NAMES_PARAMETER,
    CLASSES,
    CLASSIFIER_NAMES_PARAMETER,
    IMAGE,
    NUM_DETECTIONS,
    OUTPUTS,
    SCORES,
    TASK_PARAMETER,
)

OUTPUT_NAMES = OUTPUTS
INPUT_NAME = IMAGE


@dataclass(frozen=True)
class Detection:
    """One object: `box` is (x1, y1, x2, y2) in original image pixels."""

    box: tuple[float, float, float, float]
    score: float
    class_id: int
    class_name: str
    # Pose, OBB and segmentation ensembles (clients/tasks.py); None for a detection ensemble.
    keypoints: tuple[tuple[float, ...], ...] | None = None  # K x (x, y[, visibility]) in original pixels
    rotated_box: tuple[float, float, float, float, float] | None = None  # cx, cy, w, h, angle (radians)
    mask_rle: bytes | None = None  # COCO compressed RLE of the mask at mask_size (column-major)
    mask_size: tuple[int, int] | None = None  # (height, width) of the original image
    # A two-stage ensemble (build --classifier): the classifier's top classes of this box's crop, best first;
    # None for a box past the build's --classify-boxes (and for any other ensemble).
    classified: tuple[Classification, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.keypoints is not None:
            extra["keypoints"] = [list(p) for p in self.keypoints]
        if self.rotated_box is not None:
            extra["rotated_box"] = list(self.rotated_box)
        if self.mask_rle is not None:
            extra["mask"] = {"size": list(self.mask_size or ()), "counts": self.mask_rle.decode("ascii")}
        if self.classified is not None:
            extra["classified"] = [c.as_dict() for c in self.classified]
        return {
            "box": list(self.box),
            "score": self.score,
            "class_id": self.class_id,
            "class_name": self.class_name,
            **extra,
        }


@dataclass(frozen=True)
class Classification:
    """One of a classifier's top classes: its probability (the softmax the export ends with)."""

    class_id: int
    class_name: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        return {"class_id": self.class_id, "class_name": self.class_name, "score": self.score}


@dataclass(frozen=True)
class DetectionResult:
    """All detections of one image, best score first (the server's order). A classification ensemble returns no
    detections: its top classes, best first, are ``top``."""

    detections: tuple[Detection, ...]
    top: tuple[Classification, ...] = ()

    def __len__(self) -> int:
        return len(self.detections)

    def __iter__(self) -> Iterator[Detection]:
        return iter(self.detections)

    @property
    def boxes(self) -> np.ndarray:
        """float32 [K, 4], handy for comparing with numpy-based references."""
        return np.asarray([d.box for d in self.detections], dtype=np.float32).reshape(-1, 4)

    @property
    def scores(self) -> np.ndarray:
        return np.asarray([d.score for d in self.detections], dtype=np.float32)

    @property
    def class_ids(self) -> np.ndarray:
        return np.asarray([d.class_id for d in self.detections], dtype=np.int32)


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs to know about the ensemble, read once per client (see clients/contract.py).

    `max_batch_size` is 0 for a model without batching and None for a batching model whose limit is not
    known yet (only the restricted model-config API tells it; the client learns it from the first request
    that exceeds it). Without `class_names`, classes are named ``class_<id>``.
    """

    name: str
    max_batch_size: int | None
    class_names: tuple[str, ...]
    task: str = "detect"  # the Ultralytics task the ensemble serves (contract.TASK_OUTPUTS)
    second_stage: bool = False  # a two-stage ensemble: each box's classes too (contract.BOX_CLASSES)
    classifier_names: tuple[str, ...] = ()  # the second stage's class names, when the config was read

    @property
    def batched(self) -> bool:
        return self.max_batch_size != 0

    def class_name(self, class_id: int) -> str:
        if 0 <= class_id < len(self.class_names):
            return self.class_names[class_id]
        return f"class_{class_id}"

    def classifier_name(self, class_id: int) -> str:
        if 0 <= class_id < len(self.classifier_names):
            return self.classifier_names[class_id]
        return f"class_{class_id}"


def model_info_from_config(name: str, config: Mapping[str, Any]) -> ModelInfo:
    """Read `max_batch_size` and the `class_names` parameter (JSON list) from a model config in JSON form.

    Accepts both shapes tritonclient returns: HTTP gives the config itself, gRPC wraps it in {"config": ...}.
    """
    if "config" in config and isinstance(config["config"], Mapping):
        config = config["config"]
    max_batch = int(config.get("max_batch_size", 0) or 0)
    task = config.get("parameters", {}).get(TASK_PARAMETER, {}).get("string_value") or "detect"
    second_stage = any(o.get("name") == BOX_CLASSES for o in config.get("output", []))
    return ModelInfo(name=name, max_batch_size=max_batch, class_names=_names(name, config, CLASS_NAMES_PARAMETER),
                     task=task, second_stage=second_stage,
                     classifier_names=_names(name, config, CLASSIFIER_NAMES_PARAMETER))


def _names(model: str, config: Mapping[str, Any], parameter: str) -> tuple[str, ...]:
    """A JSON list of class names from the config's ``parameter`` (none when it is absent)."""
    raw = config.get("parameters", {}).get(parameter, {}).get("string_value")
    if raw is None:
        return ()
    try:
        names = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ClientError(f"model {model!r}: parameter {parameter} is not valid JSON ({exc.msg})") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ClientError(f"model {model!r}: parameter {parameter} must be a JSON list of strings")
    return tuple(names)


def decode_outputs(outputs: Mapping[str, np.ndarray], info: ModelInfo) -> list[DetectionResult]:
    """Cut the padded [N, max_det, ...] outputs to `num_detections` rows per image.

    Shapes are checked because a mismatch means client and ensemble disagree on the contract,
    and silently reading padding as detections would be worse than failing. A classifier's outputs become
    each image's ``top``.
    """
    if info.task == "classify":
        classes, scores = top_classes(outputs)
        return [DetectionResult((), tuple(Classification(int(c), info.class_name(int(c)), float(p))
                                          for c, p in zip(row, probabilities, strict=True)))
                for row, probabilities in zip(classes, scores, strict=True)]
    missing = [n for n in OUTPUT_NAMES if outputs.get(n) is None]
    if missing:
        raise ClientError(f"model {info.name!r} response lacks output(s) {', '.join(missing)}")
    num = np.asarray(outputs[NUM_DETECTIONS]).reshape(-1)
    batch = num.shape[0]
    boxes = np.asarray(outputs[BOXES], dtype=np.float32)
    scores = np.asarray(outputs[SCORES], dtype=np.float32)
    classes = np.asarray(outputs[CLASSES])
    if boxes.ndim == 2 and batch == 1:  # unbatched model: add the batch axis back
        boxes, scores, classes = boxes[None], scores[None], classes[None]
    max_det = boxes.shape[1] if boxes.ndim == 3 else -1
    if (
        boxes.shape != (batch, max_det, 4)
        or scores.shape != (batch, max_det)
        or classes.shape != (batch, max_det)
    ):
        raise ClientError(
            f"model {info.name!r} returned unexpected shapes: num_detections {num.shape}, boxes {boxes.shape}, "
            f"scores {scores.shape}, classes {classes.shape}"
        )
    if batch and (num.min() < 0 or num.max() > max_det):
        raise ClientError(
            f"model {info.name!r} returned num_detections {num.tolist()} outside [0, {max_det}]"
        )
    return [_decode_one(int(n), boxes[i], scores[i], classes[i], info,
                        _with_classified(task_fields(outputs, info.task, i, int(n)), outputs, info, i))
            for i, n in enumerate(num)]


def _with_classified(fields: list[dict[str, Any]], outputs: Mapping[str, np.ndarray], info: ModelInfo,
                     index: int) -> list[dict[str, Any]]:
    """A two-stage ensemble's per-box classes added to the first rows' fields (the classified boxes)."""
    if not info.second_stage:
        return fields
    if outputs.get(BOX_CLASSES) is None or outputs.get(BOX_SCORES) is None:
        raise ClientError(f"model {info.name!r} response lacks output(s) {BOX_CLASSES}, {BOX_SCORES}")
    classes, scores = np.asarray(outputs[BOX_CLASSES]), np.asarray(outputs[BOX_SCORES], dtype=np.float32)
    if classes.ndim != 3 or classes.shape != scores.shape:
        raise ClientError(f"model {info.name!r} returned {BOX_CLASSES} {classes.shape} and {BOX_SCORES} "
                          f"{scores.shape}; expected the same [N, boxes, k]")
    for k, field in enumerate(fields[:classes.shape[1]]):
        field["classified"] = tuple(Classification(int(c), info.classifier_name(int(c)), float(p))
                                    for c, p in zip(classes[index, k], scores[index, k], strict=True))
    return fields


def _decode_one(
    count: int, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, info: ModelInfo,
    fields: list[dict[str, Any]],
) -> DetectionResult:
    detections = tuple(
        Detection(
            box=(float(boxes[k, 0]), float(boxes[k, 1]), float(boxes[k, 2]), float(boxes[k, 3])),
            score=float(scores[k]),
            class_id=int(classes[k]),
            class_name=info.class_name(int(classes[k])),
            **fields[k],
        )
        for k in range(count)
    )
    return DetectionResult(detections=detections)


def split_batches(count: int, max_batch_size: int | None) -> list[range]:
    """Index ranges of at most `max_batch_size` items (a model without batching takes one at a time;
    an unknown limit sends everything at once and lets the server say the limit)."""
    step = max(1, count) if max_batch_size is None else max(1, max_batch_size)
    return [range(start, min(start + step, count)) for start in range(0, count, step)]
