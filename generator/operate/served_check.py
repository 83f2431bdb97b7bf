"""A running server's ensemble against the FP32 reference, on the accuracy gate's control set.

``generator validate --url`` and the GPU host's selftest send the control images through Triton with the project's
client and score the answers beside the in-process FP32 ONNX Runtime reference at the served thresholds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from generator.evaluation.accuracy import MapResult, coco_map, pseudo_labels
from generator.evaluation.gate import ControlSet
from generator.evaluation.reference import ImageDetections, ReferencePipeline
from generator.evaluation.task_validation import TaskPrediction
from generator.model.onnx_inspect import DetectorInfo


def served_vs_reference(url: str, model: str, reference_onnx: Path, info: DetectorInfo, control: ControlSet,
                        conf_threshold: float, iou_threshold: float, max_detections: int
                        ) -> tuple[MapResult, MapResult]:
    """mAP of a running server's ensemble and of the FP32 reference at the served thresholds.

    Without labels both are scored against the reference's own detections, so a faithful server scores
    exactly what the reference does.
    """
    from clients import DetectionClient

    ids = [int(record["id"]) for record in control.images]
    with DetectionClient(url, model=model) as client:
        served = {i: ImageDetections(r.boxes, r.scores, r.class_ids)
                  for i, r in zip(ids, client.detect_many(control.data), strict=True)}
    fp32 = ReferencePipeline(reference_onnx, conf_threshold, iou_threshold, max_detections, info=info)
    local: dict[int, ImageDetections] = {}
    for start in range(0, len(ids), 8):
        chunk = fp32.detect_many(control.data[start : start + 8])
        local.update(zip(ids[start : start + 8], chunk, strict=True))
    truth = control.labels or pseudo_labels(control.images, local, info.num_classes)
    return coco_map(truth, served), coco_map(truth, local)


def served_top_classes(url: str, model: str, images: list[bytes]) -> np.ndarray:
    """A running classification ensemble's best classes for each image (its --top-k of them), [N, k]."""
    from clients import DetectionClient

    with DetectionClient(url, model=model) as client:
        return np.stack([np.array([c.class_id for c in result.top]) for result in client.detect_many(images)])


def served_task_predictions(url: str, model: str, images: list[bytes]) -> list[TaskPrediction]:
    """A running segment, pose or obb ensemble's detections of each image, with the task's geometry."""
    from clients import DetectionClient

    with DetectionClient(url, model=model) as client:
        results = client.detect_many(images)
        task = client.model_info.task
    out = []
    for result in results:
        found = result.detections
        masks = [{"size": list(d.mask_size or ()), "counts": d.mask_rle or b""} for d in found]
        points = [d.keypoints or () for d in found]
        rotated = [d.rotated_box or () for d in found]
        out.append(TaskPrediction(
            result.boxes.reshape(-1, 4), result.scores, result.class_ids,
            masks=masks if task == "segment" else None,
            keypoints=np.asarray(points, dtype=np.float32) if task == "pose" else None,
            rotated=np.asarray(rotated, dtype=np.float32).reshape(-1, 5) if task == "obb" else None))
    return out
