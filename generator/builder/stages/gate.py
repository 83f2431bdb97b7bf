"""The build's accuracy gate stage: one entry point for ``build`` and ``validate``.

The measuring itself (control sets, mAP, raw head differences, the report) is the evaluation library's
(:mod:`generator.evaluation.gate`); this stage resolves the defaults, runs it on a graph in memory or a
file and logs the verdict. The same control set through a running server is generator/operate/served_check.py.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx

from generator.evaluation.gate import (
    DEFAULT_MAX_DROP,
    ControlSet,
    GateReport,
    gate_summary,
    run_gate,
)
from generator.model.onnx_inspect import DetectorInfo

logger = logging.getLogger(__name__)


def accuracy_gate(reference_onnx: Path, candidate: onnx.ModelProto | Path, info: DetectorInfo,
                  candidate_layout: str, precision: str, control: ControlSet, max_drop_points: float | None,
                  iou_threshold: float, max_detections: int) -> GateReport:
    """Measure ``candidate`` (a graph in memory, or an ONNX file) against the FP32 reference and log it.

    ``max_drop_points`` None takes the precision's default (``DEFAULT_MAX_DROP``). The caller decides what
    a failure stops (``ensure_passed``): a build writes nothing, ``validate`` still writes its report.
    A pose, obb, segment or classify export is measured by its task's gate (:mod:`generator.evaluation.task_gate`).
    """
    max_drop = DEFAULT_MAX_DROP[precision] if max_drop_points is None else max_drop_points
    with tempfile.TemporaryDirectory(prefix="tde-gate-") as tmp:
        if isinstance(candidate, onnx.ModelProto):
            path = Path(tmp) / "candidate.onnx"
            onnx.save(candidate, str(path))
        else:
            path = candidate
        if info.task == "detect":
            report = run_gate(reference_onnx, path, info, control, precision, max_drop, iou_threshold,
                              max_detections, candidate_layout=candidate_layout)
        else:
            from generator.evaluation.task_gate import run_task_gate

            report = run_task_gate(reference_onnx, path, info, control, precision, max_drop, iou_threshold,
                                   max_detections)
    logger.info("%s", gate_summary(report))
    return report
