"""The accuracy gate of the task heads: a pose, obb, segment or classify build against its FP32 graph.

Each graph runs in process through the task's own serving preprocess (the letterbox, or a classifier's centre
crop) and the served post-processing step (``generator.serving.tasks``), and the candidate is scored on the FP32
graph's own outputs (pseudo-labels, confidence 0.25) with the measure of its task (``task_iou``, matched and averaged as
Ultralytics' validator does: ``task_ap``):

- pose: box mAP and keypoint (OKS) mAP; segment: box mAP and mask mAP; obb: rotated-box (probabilistic IoU)
  mAP; each at 0.50:0.95 and at 0.5, the gate's drop the worst of the task's measures;
- classify: top-1 agreement (the candidate's best class is the FP32 graph's) and top-5 agreement (the FP32
  graph's best class is among the candidate's five), the drop the top-1 one.

The thresholds are the detection gate's, in points of these measures (``DEFAULT_MAX_DROP``), and so is the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.errors import GeneratorError
from generator.evaluation.accuracy import MapResult
from generator.evaluation.gate import MAP_CONF_THRESHOLD, ControlSet, GateReport
from generator.evaluation.task_ap import ApAccumulator
from generator.evaluation.task_iou import box_iou, keypoint_sigmas, mask_iou, oks, rotated_probiou
from generator.model.onnx_inspect import DetectorInfo
from generator.serving.batch import prepare_batch, to_float_nchw
from generator.serving.contract import KEYPOINTS, MASK_SIZE, MASKS, ROTATED_BOXES, TOP_CLASSES
from generator.serving.crop import center_crop_into
from generator.serving.letterbox import letterbox_into
from generator.serving.runner import OnnxRunner
from generator.serving.tasks import HeadSpec, postprocess_task, top_classes

PSEUDO_LABEL_CONF = 0.25  # the detection gate's: what predict would show
TOP_K = 5
GATED_TASKS = ("pose", "obb", "segment", "classify")


@dataclass(frozen=True)
class ImageOutputs:
    """One image's served outputs, unpadded: boxes, scores, classes and the task's own (``extra``)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    extra: dict[str, np.ndarray]

    def confident(self, threshold: float) -> ImageOutputs:
        keep = self.scores >= threshold
        return ImageOutputs(self.boxes[keep], self.scores[keep], self.classes[keep],
                            {k: (v if k == MASK_SIZE else v[keep]) for k, v in self.extra.items()})


class TaskPipeline:
    """One graph (a source export, or a served one taking uint8) through its task's preprocess and step."""

    def __init__(self, onnx_path: Path, info: DetectorInfo, iou_threshold: float, max_detections: int) -> None:
        self.info = info
        self._runner = OnnxRunner(str(onnx_path))
        self._takes_uint8 = self._runner.input_type == "tensor(uint8)"
        self._spec = HeadSpec(info.layout, info.num_classes, info.kpt_shape, min(TOP_K, info.num_classes))
        self._iou, self._max_det = iou_threshold, max_detections

    def run(self, images: Sequence[bytes]) -> tuple[np.ndarray, list[ImageOutputs]]:
        """The raw head [N, ...] and each image's outputs at the mAP threshold (classify: the top-k)."""
        classify = self.info.task == "classify"
        batch = prepare_batch(images, self.info.image_size, reduced_decode=not classify,
                              place=center_crop_into if classify else letterbox_into)
        if batch.errors:
            position, reason = next(iter(batch.errors.items()))
            raise GeneratorError(f"control image {position} rejected: {reason}")
        tensor = batch.images if self._takes_uint8 else to_float_nchw(batch.images, np.float32)
        outputs = self._runner.run(tensor)
        raw = outputs[0].astype(np.float32)
        if classify:
            top = top_classes(raw, self._spec.top_k)
            return raw, [ImageOutputs(np.zeros((0, 4)), s, c, {}) for c, s in zip(top[TOP_CLASSES], top["top_scores"],
                                                                                  strict=True)]
        protos = outputs[1] if self.info.task == "segment" else None
        out = postprocess_task(raw, self._spec, batch.letterbox, MAP_CONF_THRESHOLD, self._iou, self._max_det,
                               protos=protos)
        det = out.detections
        results = []
        for i, n in enumerate(det.num_detections[:, 0]):
            extra = {k: (v[i] if k == MASK_SIZE else v[i, :n]) for k, v in out.extras.items()}
            results.append(ImageOutputs(det.boxes[i, :n], det.scores[i, :n], det.classes[i, :n], extra))
        return raw, results


VISIBLE = 0.5  # a reference keypoint counts when its visibility score is at least this (what predict's plots draw)


def _keypoints_oks(pred: ImageOutputs, truth: ImageOutputs) -> np.ndarray:
    """OKS [truth, pred] on the reference's visible keypoints; a reference detection with none visible is compared
    on all of them (its keypoints are still served)."""
    points = np.array(truth.extra[KEYPOINTS], dtype=np.float64)
    visible = points[..., 2] >= VISIBLE
    points[..., 2] = np.where(visible.any(axis=1, keepdims=True), visible, True)
    shape = (points.shape[1], points.shape[2])
    return oks(points, np.asarray(pred.extra[KEYPOINTS], np.float64), truth.boxes.astype(np.float64),
               keypoint_sigmas(shape))


def _masks_iou(pred: ImageOutputs, truth: ImageOutputs) -> np.ndarray:
    size = [int(v) for v in truth.extra[MASK_SIZE]]
    truth_rle, pred_rle = ([{"size": size, "counts": bytes(c)} for c in o.extra[MASKS]] for o in (truth, pred))
    return mask_iou(truth_rle, pred_rle)


Overlap = Callable[[ImageOutputs, ImageOutputs], np.ndarray]  # [truth, prediction]
MEASURES: dict[str, dict[str, Overlap]] = {
    "pose": {"box": lambda p, t: box_iou(t.boxes, p.boxes), "keypoint (OKS)": _keypoints_oks},
    "obb": {"rotated-box (probiou)": lambda p, t: rotated_probiou(t.extra[ROTATED_BOXES], p.extra[ROTATED_BOXES])},
    "segment": {"box": lambda p, t: box_iou(t.boxes, p.boxes), "mask": _masks_iou},
}


def _measure(predictions: Sequence[ImageOutputs], truths: Sequence[ImageOutputs], overlap: Overlap) -> MapResult:
    scores = ApAccumulator()
    for p, t in zip(predictions, truths, strict=True):
        scores.add(overlap(p, t), t.classes, p.scores, p.classes)
    return scores.result()


def _agreement(candidate: Sequence[ImageOutputs], reference: Sequence[ImageOutputs]) -> MapResult:
    best = np.array([r.classes[0] for r in reference])
    top = np.stack([c.classes for c in candidate])
    return MapResult(float((top[:, 0] == best).mean()), float((top == best[:, None]).any(axis=1).mean()))


def _raw_diffs(reference: np.ndarray, candidate: np.ndarray, info: DetectorInfo) -> tuple[float, float, float]:
    """Max and mean absolute difference of the raw heads (boxes, best class score and the task's rows per
    anchor; a classifier's probabilities), and the max of the score part."""
    if reference.shape != candidate.shape:
        raise GeneratorError(f"the candidate's head {list(candidate.shape[1:])} does not match the reference's "
                             f"{list(reference.shape[1:])}; is it built from this ONNX?")
    if info.task == "classify":
        diff = np.abs(reference - candidate)
        return float(diff.max()), float(diff.mean()), float(diff.max())
    nc = info.num_classes
    scores = np.abs(reference[:, 4:4 + nc].max(axis=1) - candidate[:, 4:4 + nc].max(axis=1))
    rest = np.abs(np.delete(reference, np.s_[4:4 + nc], axis=1) - np.delete(candidate, np.s_[4:4 + nc], axis=1))
    every = np.concatenate([rest.ravel(), scores.ravel()])
    return float(np.nanmax(every)), float(np.nanmean(every)), float(np.nanmax(scores))


def _run_all(pipeline: TaskPipeline, control: ControlSet, batch: int = 8) -> tuple[np.ndarray, list[ImageOutputs]]:
    raws, outputs = [], []
    for start in range(0, len(control.data), batch):
        raw, results = pipeline.run(control.data[start:start + batch])
        raws.append(raw)
        outputs.extend(results)
    return np.concatenate(raws), outputs


def require_gated_task(info: DetectorInfo, labels: object | None) -> None:
    """Refuse what the task gate cannot measure, in one line."""
    if info.task not in GATED_TASKS:
        raise GeneratorError(f"the task gate measures {', '.join(GATED_TASKS)} heads; this export's task is "
                             f"'{info.task}'")
    if labels is not None:
        raise GeneratorError(f"--validate-labels: the accuracy gate of the {info.task} export compares it with the FP32 "
                             "build's own outputs on --validate-images (pseudo-labels); drop --validate-labels")


def run_task_gate(reference_onnx: Path, candidate_onnx: Path, info: DetectorInfo, control: ControlSet,
                  precision: str, max_drop_points: float, iou_threshold: float = 0.45,
                  max_detections: int = 100) -> GateReport:
    """Measure the candidate graph of a task export against the FP32 one on ``control`` (its images)."""
    require_gated_task(info, control.labels)
    ref_raw, ref_out = _run_all(TaskPipeline(reference_onnx, info, iou_threshold, max_detections), control)
    cand_raw, cand_out = _run_all(TaskPipeline(candidate_onnx, info, iou_threshold, max_detections), control)
    if info.task == "classify":
        names = ("top-1 agreement", "top-5 agreement")
        results = {"": (_agreement(ref_out, ref_out), _agreement(cand_out, ref_out))}
        label_source = "the FP32 build's top-1 class (pseudo-labels)"
    else:
        truths = [o.confident(PSEUDO_LABEL_CONF) for o in ref_out]
        if not any(len(t.scores) for t in truths):
            raise GeneratorError(f"the accuracy gate has nothing to measure: the FP32 {info.task} build finds "
                                 f"nothing on {control.source}; pass control images from the model's domain "
                                 "(--validate-images), or skip with --no-validate")
        names = ("mAP@0.5:0.95", "mAP@0.5")
        results = {name: (_measure(ref_out, truths, similarity), _measure(cand_out, truths, similarity))
                   for name, similarity in MEASURES[info.task].items()}
        label_source = f"the FP32 build's outputs at conf {PSEUDO_LABEL_CONF} (pseudo-labels)"
    worst = max(results, key=lambda k: results[k][0].map50_95 - results[k][1].map50_95)
    reference, candidate = results[worst]
    drop = (reference.map50_95 - candidate.map50_95) * 100
    raw_max, raw_mean, score_max = _raw_diffs(ref_raw, cand_raw, info)
    return GateReport(
        precision=precision, control_set=control.source, images=len(control.data), label_source=label_source,
        reference=reference, candidate=candidate, drop_points=drop,
        drop_points_map50=(reference.map50 - candidate.map50) * 100, max_drop_points=max_drop_points,
        passed=drop <= max_drop_points, raw_max_abs_diff=raw_max, raw_mean_abs_diff=raw_mean,
        score_max_abs_diff=score_max, task=info.task, measure=worst, metric_names=names,
        measures={k: {"reference": r.map50_95, "candidate": c.map50_95, "reference_50": r.map50,
                      "candidate_50": c.map50} for k, (r, c) in results.items() if k},
    )
