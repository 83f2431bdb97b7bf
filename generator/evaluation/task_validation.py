"""``generator validate`` for segment, pose and obb builds: mAP of the task's own geometry on YOLO txt labels.

Each task is scored twice, like Ultralytics' validators report it: the boxes (IoU) and the task's geometry (mask
IoU on COCO RLE, keypoint OKS, rotated-box IoU), through one matching and AP (generator.evaluation.task_ap).
OBB is scored with Ultralytics' probabilistic IoU (what ``yolo val`` reports) and with the exact polygon IoU.
The served detector graph runs in-process on the serving preprocess and post-processing; ``--url`` scores a
running ensemble's answers (generator.operate.served_check.served_task_predictions) on the same labels.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from generator.errors import GeneratorError
from generator.evaluation.accuracy import MapResult
from generator.evaluation.task_ap import ApAccumulator
from generator.evaluation.task_iou import (
    box_iou,
    keypoint_sigmas,
    mask_iou,
    oks,
    rotated_iou,
    rotated_probiou,
)
from generator.evaluation.yolo_labels import TaskLabels, read_labels
from generator.model.onnx_inspect import DetectorInfo

# What each task reports, in order: the metric's name and how it measures overlap.
METRICS = {"segment": ("box", "mask"), "pose": ("box", "pose"), "obb": ("obb", "obb_polygon")}


@dataclass(frozen=True)
class TaskPrediction:
    """One image's detections in source pixels and the task's geometry for each."""

    boxes: np.ndarray  # [P, 4] xyxy
    scores: np.ndarray  # [P]
    classes: np.ndarray  # [P]
    masks: list[dict[str, Any]] | None = None  # segment: COCO RLE at the source size
    keypoints: np.ndarray | None = None  # pose: [P, K, D]
    rotated: np.ndarray | None = None  # obb: [P, 5] xywhr


@dataclass(frozen=True)
class LabelledSet:
    images: list[bytes]
    labels: list[TaskLabels]
    names: list[str]
    objects: int


@dataclass(frozen=True)
class TaskScores:
    task: str
    images: int
    objects: int
    metrics: dict[str, MapResult]

    def line(self, where: str) -> str:
        parts = ", ".join(f"{name} mAP@0.5:0.95 {m.map50_95:.4f} (mAP@0.5 {m.map50:.4f})"
                          for name, m in self.metrics.items())
        return f"{where}: {parts} on {self.images} images, {self.objects} labelled objects"

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "images": self.images, "objects": self.objects,
                "metrics": {name: {"map50_95": m.map50_95, "map50": m.map50} for name, m in self.metrics.items()}}


def labelled_set(images_dir: Path, labels_dir: Path, task: str, kpt_shape: tuple[int, int] | None,
                 limit: int = 500) -> LabelledSet:
    """The images of ``images_dir`` (sorted, at most ``limit``) and each one's labels from ``labels_dir``."""
    import cv2

    from generator.evaluation.gate import IMAGE_SUFFIXES

    if not images_dir.is_dir():
        raise GeneratorError(f"--images {images_dir} is not a folder")
    files = sorted(p for p in images_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not files:
        raise GeneratorError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {images_dir}")
    data, labels = [], []
    for path in files:
        content = path.read_bytes()
        decoded = cv2.imdecode(np.frombuffer(content, np.uint8), cv2.IMREAD_COLOR)
        if decoded is None:
            raise GeneratorError(f"cannot decode image {path}")
        data.append(content)
        labels.append(read_labels(labels_dir / f"{path.stem}.txt", task, (decoded.shape[1], decoded.shape[0]),
                                  kpt_shape))
    objects = sum(len(label.classes) for label in labels)
    if not objects:
        raise GeneratorError(f"no labelled object for the {len(files)} images of {images_dir} in {labels_dir} "
                             "(one <image stem>.txt per image)")
    return LabelledSet(data, labels, [p.name for p in files], objects)


def _overlaps(task: str, label: TaskLabels, prediction: TaskPrediction,
              kpt_shape: tuple[int, int] | None) -> dict[str, np.ndarray]:
    if not len(label.classes) or not len(prediction.scores):
        return {name: np.zeros((len(label.classes), len(prediction.scores))) for name in METRICS[task]}
    if task == "obb":
        assert label.rotated is not None and prediction.rotated is not None
        return {"obb": rotated_probiou(label.rotated, prediction.rotated),
                "obb_polygon": rotated_iou(label.rotated, prediction.rotated)}
    boxes = box_iou(label.boxes, prediction.boxes)
    if task == "segment":
        assert label.masks is not None and prediction.masks is not None
        return {"box": boxes, "mask": mask_iou(label.masks, prediction.masks)}
    assert label.keypoints is not None and prediction.keypoints is not None and kpt_shape is not None
    return {"box": boxes, "pose": oks(label.keypoints, prediction.keypoints, label.boxes, keypoint_sigmas(kpt_shape))}


def score(task: str, labels: Sequence[TaskLabels], predictions: Sequence[TaskPrediction],
          kpt_shape: tuple[int, int] | None = None) -> TaskScores:
    """The task's metrics (METRICS) of ``predictions`` against ``labels``, image by image."""
    accumulators = {name: ApAccumulator() for name in METRICS[task]}
    for label, prediction in zip(labels, predictions, strict=True):
        for name, overlap in _overlaps(task, label, prediction, kpt_shape).items():
            accumulators[name].add(overlap, label.classes, prediction.scores.astype(np.float64),
                                   prediction.classes.astype(np.int64))
    objects = sum(len(label.classes) for label in labels)
    return TaskScores(task, len(labels), objects, {name: acc.result() for name, acc in accumulators.items()})


def predictions_in_process(model_path: Path, info: DetectorInfo, images: Sequence[bytes], conf_threshold: float,
                           iou_threshold: float, max_detections: int, reduced_decode: bool = True,
                           progress: Callable[[int], None] | None = None) -> list[TaskPrediction]:
    """The served detector graph and the serving post-processing on each image, as the ensemble runs them."""
    from generator.serving.batch import prepare_batch, to_float_nchw
    from generator.serving.contract import KEYPOINTS, MASK_SIZE, MASKS, ROTATED_BOXES
    from generator.serving.runner import OnnxRunner
    from generator.serving.tasks import HeadSpec, postprocess_task

    runner = OnnxRunner(str(model_path))
    spec = HeadSpec(info.layout, info.num_classes, info.kpt_shape)
    out = []
    for position, data in enumerate(images):
        batch = prepare_batch([data], info.image_size, reduced_decode=reduced_decode)
        if batch.errors:
            raise GeneratorError(f"image {position}: {batch.errors[0]}")
        pixels = batch.images if runner.input_type == "tensor(uint8)" else to_float_nchw(
            batch.images, np.dtype(np.float16 if runner.input_type == "tensor(float16)" else np.float32))
        outputs = dict(zip(runner.output_names, runner.run(pixels), strict=True))
        protos = outputs[info.protos.name] if info.protos is not None else None
        result = postprocess_task(outputs[info.output.name], spec, batch.letterbox, conf_threshold, iou_threshold,
                                  max_detections, protos)
        count = int(result.detections.num_detections[0, 0])
        extras = result.extras
        masks = None
        if MASKS in extras:
            height, width = (int(v) for v in extras[MASK_SIZE][0])
            masks = [{"size": [height, width], "counts": bytes(c)} for c in extras[MASKS][0, :count]]
        out.append(TaskPrediction(
            result.detections.boxes[0, :count], result.detections.scores[0, :count],
            result.detections.classes[0, :count], masks,
            extras[KEYPOINTS][0, :count] if KEYPOINTS in extras else None,
            extras[ROTATED_BOXES][0, :count] if ROTATED_BOXES in extras else None))
        if progress is not None:
            progress(position)
    return out


def report(in_process: TaskScores, served: TaskScores | None, served_local: TaskScores | None) -> bytes:
    """validation JSON: the in-process scores, and through Triton beside in-process at the served thresholds."""
    return json.dumps({"in_process": in_process.as_dict(), "served": served.as_dict() if served else None,
                       "in_process_at_served_thresholds": served_local.as_dict() if served_local else None},
                      indent=1).encode()
