"""COCO-style mAP with faster-coco-eval, on ground-truth labels or on FP32 pseudo-labels."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from generator.evaluation.reference import ImageDetections


@dataclass(frozen=True)
class MapResult:
    map50_95: float
    map50: float


def detections_to_coco(predictions: Mapping[int, ImageDetections]) -> list[dict[str, Any]]:
    results = []
    for image_id, det in predictions.items():
        for box, score, cls in zip(det.boxes, det.scores, det.classes, strict=True):
            x1, y1, x2, y2 = (float(v) for v in box)
            results.append({"image_id": image_id, "category_id": int(cls), "bbox": [x1, y1, x2 - x1, y2 - y1],
                            "score": float(score)})
    return results


def pseudo_labels(images: Sequence[dict[str, Any]], predictions: Mapping[int, ImageDetections],
                  num_classes: int) -> dict[str, Any]:
    """A COCO ground truth made of the reference's detections, for control sets without labels."""
    annotations: list[dict[str, Any]] = []
    for result in detections_to_coco(predictions):
        x, y, w, h = result["bbox"]
        annotations.append({"id": len(annotations) + 1, "image_id": result["image_id"],
                            "category_id": result["category_id"], "bbox": [x, y, w, h], "area": w * h,
                            "iscrowd": 0})
    return {"images": list(images), "annotations": annotations,
            "categories": [{"id": i, "name": str(i)} for i in range(num_classes)]}


def coco_map(ground_truth: dict[str, Any], predictions: Mapping[int, ImageDetections]) -> MapResult:
    """mAP@0.5:0.95 and mAP@0.5 of ``predictions`` (keyed by COCO image id) against ``ground_truth``."""
    from faster_coco_eval import COCO, COCOeval_faster

    results = detections_to_coco(predictions)
    if not results or not ground_truth.get("annotations"):
        return MapResult(0.0, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(ground_truth)
        dt = gt.loadRes(results)
        evaluator = COCOeval_faster(gt, dt, iouType="bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return MapResult(float(evaluator.stats[0]), float(evaluator.stats[1]))
