"""Draw detections onto a copy of the image with OpenCV (client-side, for humans to look at)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clients.detection import Detection, DetectionResult
from clients.errors import ClientError
from clients.rle import decode_mask

_WRITABLE = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def _color(class_id: int) -> tuple[int, int, int]:
    """A stable, well-spread BGR colour per class."""
    hue = (class_id * 47) % 180
    import cv2

    bgr = cv2.cvtColor(np.array([[[hue, 200, 255]]], dtype=np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
    return int(bgr[0]), int(bgr[1]), int(bgr[2])


def _draw_task(canvas: np.ndarray, det: Detection, color: tuple[int, int, int], thickness: int) -> None:
    """A segmentation mask tinted in, or the keypoints the model sees (visibility above one half) as dots."""
    import cv2

    if det.mask_rle is not None and det.mask_size == canvas.shape[:2]:
        mask = decode_mask(det.mask_rle, *det.mask_size)
        canvas[mask] = (0.5 * canvas[mask] + 0.5 * np.array(color)).astype(np.uint8)
    for point in det.keypoints or ():
        if len(point) < 3 or point[2] > 0.5:
            cv2.circle(canvas, (round(point[0]), round(point[1])), thickness + 2, color, cv2.FILLED)


def _label(canvas: np.ndarray, name: str, score: float, class_id: int) -> None:
    import cv2

    label = f"{name} {score:.2f}"
    (width, height), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
    cv2.rectangle(canvas, (0, 0), (width, height + base), _color(class_id), cv2.FILLED)
    cv2.putText(canvas, label, (0, height), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)


def draw_detections(image: np.ndarray, result: DetectionResult) -> np.ndarray:
    """A BGR copy of `image` with one box and a `name score` label per detection, plus its rotated box, mask
    or keypoints when the ensemble serves a task with them; a classifier's best class labels the corner, and a
    two-stage ensemble's best class of each box's crop follows its label."""
    import cv2

    canvas = image.copy()
    thickness = max(1, round(min(canvas.shape[:2]) / 300))
    if result.top:  # a classifier: its best class in the corner
        _label(canvas, result.top[0].class_name, result.top[0].score, result.top[0].class_id)
    for det in result:
        x1, y1, x2, y2 = (round(v) for v in det.box)
        color = _color(det.class_id)
        if det.rotated_box is not None:  # the rotated box instead of its axis-aligned hull
            (cx, cy, w, h, angle) = det.rotated_box
            corners = cv2.boxPoints(((cx, cy), (w, h), float(np.degrees(angle))))
            cv2.polylines(canvas, [np.round(corners).astype(np.int32)], True, color, thickness)
        else:
            cv2.rectangle(canvas, (x1, y1), (x2, y2), color, thickness)
        _draw_task(canvas, det, color, thickness)
        label = f"{det.class_name} {det.score:.2f}"
        if det.classified:  # a two-stage ensemble: the classifier's best class of this box's crop
            label += f" | {det.classified[0].class_name} {det.classified[0].score:.2f}"
        (w, h), base = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        top = y1 - h - base if y1 - h - base >= 0 else y1  # keep the label inside the image
        cv2.rectangle(canvas, (x1, top), (x1 + w, top + h + base), color, cv2.FILLED)
        cv2.putText(canvas, label, (x1, top + h), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    return canvas


def annotate_image(data: bytes, result: DetectionResult, output: Path) -> Path:
    """Decode `data`, draw `result`, write to `output` (as PNG if OpenCV cannot write that suffix)."""
    import cv2

    # IMREAD_COLOR applies EXIF orientation, so boxes land where the server (which also honours it) saw them.
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise ClientError(f"cannot decode the image to annotate {output.name!r}")
    if output.suffix.lower() not in _WRITABLE:
        output = output.with_suffix(".png")
    output.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(output), draw_detections(image, result)):
        raise ClientError(f"cannot write annotated image {str(output)!r}")
    return output
