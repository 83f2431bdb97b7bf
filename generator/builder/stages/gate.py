"""The build's accuracy gate stage: one entry point for ``build`` and ``validate``, plus the served check.

The measuring itself (control sets, mAP, raw head differences, the report) is the evaluation library's
(:mod:`generator.evaluation.gate`); this stage resolves the defaults, runs it on a graph in memory or a
file, logs the verdict, and compares a running server's ensemble with the FP32 reference.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx

from generator.evaluation.accuracy import MapResult, coco_map, pseudo_labels
from generator.evaluation.gate import (
    DEFAULT_MAX_DROP,
    ControlSet,
    GateReport,
    gate_summary,
    run_gate,
)
from generator.evaluation.reference import ImageDetections, ReferencePipeline
from generator.model.onnx_inspect import DetectorInfo

logger = logging.getLogger(__name__)


def accuracy_gate(reference_onnx: Path, candidate: onnx.ModelProto | Path, info: DetectorInfo,
                  candidate_layout: str, precision: str, control: ControlSet, max_drop_points: float | None,
                  iou_threshold: float, max_detections: int) -> GateReport:
    """Measure ``candidate`` (a graph in memory, or an ONNX file) against the FP32 reference and log it.

    ``max_drop_points`` None takes the precision's default (``DEFAULT_MAX_DROP``). The caller decides what
    a failure stops (``ensure_passed``): a build writes nothing, ``validate`` still writes its report.
    """
    max_drop = DEFAULT_MAX_DROP[precision] if max_drop_points is None else max_drop_points
    with tempfile.TemporaryDirectory(prefix="tde-gate-") as tmp:
        if isinstance(candidate, onnx.ModelProto):
            path = Path(tmp) / "candidate.onnx"
            onnx.save(candidate, str(path))
        else:
            path = candidate
        report = run_gate(reference_onnx, path, info, control, precision, max_drop, iou_threshold,
                          max_detections, candidate_layout=candidate_layout)
    logger.info("%s", gate_summary(report))
    return report


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
