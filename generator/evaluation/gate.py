"""The accuracy gate: a built detector against the FP32 reference on a control set.

mAP is measured on labels when given, otherwise on the FP32 reference's own detections (pseudo-labels),
plus the numeric difference of the raw head outputs (boxes and best class score per anchor, which is what
both a full head and a served graph's reduced one carry). The build runs it for FP16/INT8 and fails when the
drop exceeds the threshold, so precision never costs accuracy silently.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from generator.errors import GeneratorError
from generator.evaluation.accuracy import MapResult, coco_map, pseudo_labels
from generator.evaluation.reference import ImageDetections, ReferencePipeline
from generator.model.onnx_inspect import DetectorInfo
from generator.serving.nms import boxes_and_best_scores

# Ultralytics validates at a very low threshold so mAP sees the whole precision-recall curve.
MAP_CONF_THRESHOLD = 0.001
DEFAULT_MAX_DROP = {"fp32": 0.1, "fp16": 0.5, "int8": 1.5}  # mAP@0.5:0.95 points
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


class AccuracyGateError(GeneratorError):
    """The built model lost more accuracy than allowed."""


@dataclass(frozen=True)
class ControlSet:
    images: list[dict[str, Any]]  # COCO image records: id, file_name, width, height
    data: list[bytes]
    labels: dict[str, Any] | None  # COCO ground truth, or None for pseudo-labels
    source: str


@dataclass(frozen=True)
class GateReport:
    precision: str
    control_set: str
    images: int
    label_source: str
    reference: MapResult
    candidate: MapResult
    drop_points: float
    drop_points_map50: float
    max_drop_points: float
    passed: bool
    raw_max_abs_diff: float
    raw_mean_abs_diff: float
    score_max_abs_diff: float
    # A task head's gate (generator.evaluation.task_gate): the task, the measure that dropped most (reference
    # and candidate are its), the names of its two numbers, and every measure of the task.
    task: str = "detect"
    measure: str = ""
    metric_names: tuple[str, str] = ("mAP@0.5:0.95", "mAP@0.5")
    measures: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_markdown(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        first, second = self.metric_names
        return "\n".join([
            f"# Accuracy gate: {verdict}",
            "",
            f"Control set: {self.control_set} ({self.images} images), labels: {self.label_source}.",
            "",
            f"| model{f' ({self.task}: {self.measure})' if self.measure else ''} | {first} | {second} |",
            "|---|---|---|",
            f"| FP32 reference | {self.reference.map50_95:.4f} | {self.reference.map50:.4f} |",
            f"| {self.precision.upper()} built | {self.candidate.map50_95:.4f} | {self.candidate.map50:.4f} |",
            *(f"| {self.precision.upper()} {name} (FP32) | {m['candidate']:.4f} ({m['reference']:.4f}) | "
              f"{m['candidate_50']:.4f} ({m['reference_50']:.4f}) |" for name, m in self.measures.items()),
            "",
            f"Drop: {self.drop_points:.2f} points {first} ({self.drop_points_map50:.2f} of {second}); "
            f"allowed {self.max_drop_points:.2f}.",
            f"Raw head output difference (boxes and best class score per anchor): max {self.raw_max_abs_diff:.4g}, "
            f"mean {self.raw_mean_abs_diff:.4g}; best-score max {self.score_max_abs_diff:.4g}.",
            "",
        ])


def synthetic_control_set(count: int = 64, seed: int = 20_240_601) -> ControlSet:
    """Labelled synthetic scenes (the demo detector's domain) at mixed camera sizes."""
    from generator.synthetic import write_dataset

    with tempfile.TemporaryDirectory() as tmp:
        labels_path = write_dataset(Path(tmp), count, seed, sizes=((640, 480), (1280, 720), (480, 640)))
        labels = json.loads(labels_path.read_text())
        data = [(labels_path.parent / record["file_name"]).read_bytes() for record in labels["images"]]
    return ControlSet(labels["images"], data, labels, f"synthetic scenes (seed {seed})")


def folder_control_set(images_dir: Path, labels_path: Path | None = None, limit: int = 500) -> ControlSet:
    """Images from a folder, with COCO labels whose file_name matches the files when given."""
    if not images_dir.is_dir():
        raise GeneratorError(f"control image folder not found: {images_dir}")
    if labels_path is not None and not labels_path.is_file():
        raise GeneratorError(f"labels file not found: {labels_path}")
    if labels_path is not None:
        labels = json.loads(labels_path.read_text())
        records = labels["images"][:limit]
        data = []
        for record in records:
            path = images_dir / record["file_name"]
            if not path.is_file():
                raise GeneratorError(f"{labels_path} names {record['file_name']}, which is not in {images_dir}")
            data.append(path.read_bytes())
        return ControlSet(records, data, labels, str(images_dir))
    files = sorted(p for p in images_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    if not files:
        raise GeneratorError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {images_dir}")
    records, data = [], []
    for image_id, path in enumerate(files, start=1):
        content = path.read_bytes()
        decoded = cv2.imdecode(np.frombuffer(content, np.uint8), cv2.IMREAD_COLOR)
        if decoded is None:
            raise GeneratorError(f"cannot decode control image {path}")
        records.append({"id": image_id, "file_name": path.name, "width": decoded.shape[1],
                        "height": decoded.shape[0]})
        data.append(content)
    return ControlSet(records, data, None, str(images_dir))


def _run(pipeline: ReferencePipeline, control: ControlSet, batch: int = 8) -> tuple[dict[int, ImageDetections], np.ndarray]:
    detections: dict[int, ImageDetections] = {}
    raws = []
    for start in range(0, len(control.data), batch):
        raw, letterbox = pipeline.raw(control.data[start : start + batch])
        raws.append(raw.astype(np.float32))
        for record, det in zip(control.images[start : start + batch], pipeline.postprocess(raw, letterbox),
                               strict=True):
            detections[int(record["id"])] = det
    return detections, np.concatenate(raws)


def run_gate(
    reference_onnx: Path,
    candidate_onnx: Path,
    info: DetectorInfo,
    control: ControlSet,
    precision: str,
    max_drop_points: float,
    iou_threshold: float = 0.45,
    max_detections: int = 100,
    candidate_layout: str | None = None,
) -> GateReport:
    """Measure the candidate (a served or precision graph) against the FP32 reference on ``control``.

    ``candidate_layout`` is the head layout the candidate graph outputs (``v8_reduced`` for a served
    graph with the class reduction); default: the reference's, ``info.layout``.
    """
    reference = ReferencePipeline(reference_onnx, MAP_CONF_THRESHOLD, iou_threshold, max_detections, info=info)
    candidate = ReferencePipeline(candidate_onnx, MAP_CONF_THRESHOLD, iou_threshold, max_detections, info=info,
                                  layout=candidate_layout)
    ref_dets, ref_raw = _run(reference, control)
    cand_dets, cand_raw = _run(candidate, control)
    if control.labels is not None:
        ground_truth, label_source = control.labels, "ground truth"
    else:
        confident = {
            k: ImageDetections(d.boxes[d.scores >= 0.25], d.scores[d.scores >= 0.25], d.classes[d.scores >= 0.25])
            for k, d in ref_dets.items()
        }
        ground_truth = pseudo_labels(control.images, confident, info.num_classes)
        label_source = "FP32 reference detections at conf 0.25 (pseudo-labels)"
    if not ground_truth.get("annotations"):
        raise GeneratorError(
            f"the accuracy gate has nothing to measure: no {label_source} on {control.source}; pass control "
            "images from the model's domain (--validate-images / --images), or skip with --no-validate"
        )
    ref_map = coco_map(ground_truth, ref_dets)
    cand_map = coco_map(ground_truth, cand_dets)
    drop = (ref_map.map50_95 - cand_map.map50_95) * 100
    # Like with like: a served graph may output the reduced head of the reference's full one.
    ref_boxes, ref_best = boxes_and_best_scores(ref_raw, reference.layout)
    cand_boxes, cand_best = boxes_and_best_scores(cand_raw, candidate.layout)
    if ref_boxes.shape != cand_boxes.shape:
        raise GeneratorError(
            f"the candidate's head ({candidate.layout}, {list(cand_raw.shape[1:])}) does not match the "
            f"reference's ({reference.layout}, {list(ref_raw.shape[1:])}); is it built from this ONNX?"
        )
    score_rows = np.abs(ref_best - cand_best)
    diff = np.concatenate([np.abs(ref_boxes - cand_boxes).ravel(), score_rows.ravel()])
    return GateReport(
        precision=precision,
        control_set=control.source,
        images=len(control.data),
        label_source=label_source,
        reference=ref_map,
        candidate=cand_map,
        drop_points=drop,
        drop_points_map50=(ref_map.map50 - cand_map.map50) * 100,
        max_drop_points=max_drop_points,
        passed=drop <= max_drop_points,
        raw_max_abs_diff=float(np.nanmax(diff)) if diff.size else 0.0,
        raw_mean_abs_diff=float(np.nanmean(diff)) if diff.size else 0.0,
        score_max_abs_diff=float(np.nanmax(score_rows)) if score_rows.size else 0.0,
    )


def report_files(report: GateReport) -> dict[str, bytes]:
    return {
        "validation.json": (json.dumps(asdict(report), indent=2) + "\n").encode(),
        "validation.md": report.to_markdown().encode(),
    }


def load_control_set(images: Path | None, labels: Path | None, count: int) -> ControlSet:
    if images is None:
        if labels is not None:
            raise GeneratorError("--labels needs --images (the folder the labels' file_name entries refer to)")
        return synthetic_control_set(count)
    return folder_control_set(images, labels)


def gate_summary(report: GateReport) -> str:
    what = f"{report.measure} {report.metric_names[0]}".strip()
    return (f"accuracy gate {'passed' if report.passed else 'FAILED'}: {report.precision} {what} "
            f"{report.candidate.map50_95:.4f} vs FP32 {report.reference.map50_95:.4f} "
            f"(drop {report.drop_points:.2f} pt, allowed {report.max_drop_points:.2f}) on {report.images} images")


def ensure_passed(report: GateReport, diagnosis: str | None = None) -> None:
    """Raise on a failed gate; ``diagnosis`` (the layer-wise summary: where the error starts) joins the message."""
    if not report.passed:
        where = f"; {diagnosis}" if diagnosis else ""
        raise AccuracyGateError(f"{gate_summary(report)}{where}; {_remedy(report.precision)}")


def _remedy(precision: str) -> str:
    """What a user can do about a failed gate, for the precision that failed it."""
    if precision == "int8":
        return ("calibrate on more representative images (--calib-images), keep the worst layers out of INT8 "
                "(--int8-exclude NODE ..., or --auto-keep N to let the build pick them; --int8-float fp32), "
                "raise --max-map-drop, or build with --precision fp16")
    if precision == "fp16":
        return ("keep the failing layers in FP32 (--fp16-keep NODE ..., or --auto-keep N to let the build pick "
                "them), raise --max-map-drop, or build with --precision fp32")
    return "the FP32 graph should match its source: rebuild from the original ONNX"
