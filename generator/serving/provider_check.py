"""A GPU detector's load-time check: its provider must detect on control images what the CPU provider detected.

The accuracy gate measures a graph on ONNX Runtime's CPU provider; the GPU detector serves it on the CUDA provider,
whose convolutions round differently (TF32 on Ampere and later, cuDNN's FP16 accumulation). For FP32 and FP16 graphs
that moves a few boxes by a fraction of a pixel. An INT8 Q/DQ graph can turn the same tiny differences into other
detections: an activation that lands on the other side of a quantisation step changes every layer after it. On the
lent H200 a yolo11n-structure INT8 graph agreed with its own CPU path on 317 of 845 boxes; here, on the CPU alone, a
+-1 grey-level change on 5 % of the pixels moves the same graph's detections as far (F1 0.64; FP32: 0.99), while
switching the CPU provider's graph optimisations off changes nothing (F1 1.00: the CPU path the gate measured is the
float Q/DQ simulation the CUDA provider runs, not integer kernels). So the build stores a few letterboxed control
images with the CPU provider's detections beside the served graph (``CHECK_FILE``), and the detector runs them on
its own provider at load: below ``MIN_AGREEMENT`` it refuses to load, saying so, instead of serving detections the
gate never saw.

Agreement is the rollout's (generator/builder/rollout/agreement.py): 2 x matches / (all detections of both), a
match being the same class with IoU >= 0.5, or every corner within a pixel (the tiny boxes of untrained weights).
Pure numpy: copied into the detector's model folder with the rest of ``generator.serving``.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .nms import postprocess

CHECK_FILE = "provider_check.npz"
CHECK_PARAMETER = "provider_check"  # the detector config names the file; absent: no check
MIN_AGREEMENT_PARAMETER = "provider_min_agreement"
MIN_AGREEMENT = 0.9
MIN_BOXES = 10  # fewer control boxes than this say nothing either way: the check reports and passes
MATCH_IOU = 0.5

Detections = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes [n, 4], scores [n], classes [n]


class ProviderDisagreement(RuntimeError):
    """The serving provider's detections on the control images differ from the CPU provider's."""


@dataclass(frozen=True)
class ControlSet:
    images: np.ndarray  # the served input batch (uint8 [K, H, W, 3] letterboxed)
    letterbox: np.ndarray  # float32 [K, 6]
    layout: str
    thresholds: tuple[float, float, int]  # conf, iou, max detections
    reference: list[Detections]  # the CPU provider's, per image


def per_image(raw: np.ndarray, control: ControlSet) -> list[Detections]:
    """The NMS step's detections of a raw head, one (boxes, scores, classes) per image."""
    conf, iou, max_det = control.thresholds
    found = postprocess(raw, control.layout, control.letterbox, conf, iou, max_det)
    return [(found.boxes[i, :n], found.scores[i, :n], found.classes[i, :n])
            for i, n in enumerate(found.num_detections[:, 0])]


def save_control(images: np.ndarray, letterbox: np.ndarray, layout: str, thresholds: tuple[float, float, int],
                 raw: np.ndarray) -> bytes:
    """The control file: images, letterbox, NMS settings and the reference head (detections derive from it)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, images=images, letterbox=letterbox, layout=np.array(layout),
                        thresholds=np.array(thresholds, dtype=np.float64), raw=raw)
    return buffer.getvalue()


def load_control(path: Path) -> ControlSet:
    with np.load(path, allow_pickle=False) as data:
        conf, iou, max_det = (float(v) for v in data["thresholds"])
        control = ControlSet(data["images"], data["letterbox"], str(data["layout"]), (conf, iou, int(max_det)), [])
        return ControlSet(control.images, control.letterbox, control.layout, control.thresholds,
                          per_image(data["raw"], control))


def _matches(first: Detections, second: Detections) -> int:
    boxes_a, scores_a, classes_a = first
    boxes_b, _, classes_b = second
    if len(scores_a) == 0 or len(classes_b) == 0:
        return 0
    a, b = boxes_a.astype(np.float64), boxes_b.astype(np.float64)
    top_left, bottom_right = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=2)
    union = np.prod(a[:, 2:] - a[:, :2], axis=1)[:, None] + np.prod(b[:, 2:] - b[:, :2], axis=1)[None, :] - inter
    overlap = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    close = np.abs(a[:, None, :] - b[None, :, :]).max(axis=2) <= 1.0
    same = (overlap >= MATCH_IOU) | close
    same &= np.asarray(classes_a)[:, None] == np.asarray(classes_b)[None, :]
    taken = np.zeros(len(classes_b), dtype=bool)
    found = 0
    for row in np.argsort(-np.asarray(scores_a), kind="stable"):
        free = np.where(~taken & same[row])[0]
        if len(free):
            taken[free[np.argmax(overlap[row, free])]] = True
            found += 1
    return found


def agreement(reference: list[Detections], served: list[Detections]) -> tuple[float, int]:
    """(F1 of the two detection sets, detections of both) over the control images."""
    total = sum(len(r[1]) + len(s[1]) for r, s in zip(reference, served, strict=True))
    matched = sum(_matches(r, s) for r, s in zip(reference, served, strict=True))
    return (2.0 * matched / total if total else 1.0), total


def check_provider(run: Callable[[Any], list[np.ndarray]], path: Path, provider: str,
                   min_agreement: float = MIN_AGREEMENT) -> str:
    """Run the control images through ``run`` (the detector's runner); a line for the log, or
    ``ProviderDisagreement`` when the detections agree less than ``min_agreement``."""
    control = load_control(path)
    served = per_image(run(control.images)[0], control)
    score, total = agreement(control.reference, served)
    boxes = sum(len(r[1]) for r in control.reference)
    said = (f"{provider} agrees with the CPU provider (what the accuracy gate measured) on {len(served)} control "
            f"images: F1 {score:.3f} over {boxes} reference and {total - boxes} served detections")
    if boxes < MIN_BOXES:
        return f"{said}; too few detections to judge, served"
    if score < min_agreement:
        raise ProviderDisagreement(
            f"{said}, below the {min_agreement:g} this repository requires: this graph's detections on "
            f"{provider} are not the ones the gate measured (INT8 Q/DQ graphs turn the GPU's rounding into "
            "different detections); rebuild with --precision fp16 or fp32 (or calibrate INT8 on more of your own "
            f"images), or serve it with --device cpu; or set the detector config's {MIN_AGREEMENT_PARAMETER} "
            "parameter lower to serve it anyway")
    return said
