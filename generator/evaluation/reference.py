"""The in-process FP32 reference: the same ONNX, preprocessing and NMS as the served ensemble.

Tests compare the served detections against it, and the accuracy gate uses it as the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.model.onnx_inspect import DetectorInfo, inspect_onnx
from generator.model.tasks import require_detect
from generator.serving.batch import prepare_batch, to_float_nchw
from generator.serving.images import DEFAULT_LIMITS, ImageError, ImageLimits
from generator.serving.nms import postprocess
from generator.serving.runner import OnnxRunner


@dataclass(frozen=True)
class ImageDetections:
    boxes: np.ndarray  # float32 [K, 4], x1 y1 x2 y2 in source pixels
    scores: np.ndarray  # float32 [K]
    classes: np.ndarray  # int32 [K]


class ReferencePipeline:
    def __init__(
        self,
        onnx_path: Path | str,
        conf_threshold: float = 0.25,
        iou_threshold: float = 0.45,
        max_detections: int = 100,
        limits: ImageLimits = DEFAULT_LIMITS,
        reduced_decode: bool = True,
        image_size: tuple[int, int] | None = None,
        info: DetectorInfo | None = None,
        layout: str | None = None,
    ) -> None:
        # ``info`` describes the original detector when ``onnx_path`` is a served graph (uint8 input);
        # ``layout`` is the head layout that graph outputs when it differs (``v8_reduced``), default
        # ``info.layout``. It is never guessed from the shape: [N, 6, A] is also a two-class v8 head.
        self.info = info or inspect_onnx(Path(onnx_path), image_size)
        require_detect(self.info.task, "the reference pipeline (validate, the accuracy gate, selftest)")
        self.layout = layout or self.info.layout
        self._runner = OnnxRunner(str(onnx_path))
        self._takes_uint8 = self._runner.input_type == "tensor(uint8)"
        self.conf_threshold = conf_threshold
        self.iou_threshold = iou_threshold
        self.max_detections = max_detections
        self.limits = limits
        self.reduced_decode = reduced_decode
        self.class_names = self.info.class_names

    def detect(self, image: bytes) -> ImageDetections:
        return self.detect_many([image])[0]

    def raw(self, images: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Raw head output and letterbox parameters; raise ``ImageError`` naming the first bad image."""
        batch = prepare_batch(images, self.info.image_size, self.limits, self.reduced_decode)
        if batch.errors:
            position, reason = next(iter(batch.errors.items()))
            raise ImageError(f"image {position}: {reason}")
        if self._takes_uint8:
            tensor = batch.images
        else:
            tensor = to_float_nchw(batch.images, np.dtype(self.info.input.numpy_dtype))
        (raw,) = self._runner.run(tensor)
        return raw, batch.letterbox

    def detect_many(self, images: Sequence[bytes]) -> list[ImageDetections]:
        """Detect on every image; raise ``ImageError`` naming the first rejected image."""
        raw, letterbox = self.raw(images)
        return self.postprocess(raw, letterbox)

    def postprocess(self, raw: np.ndarray, letterbox: np.ndarray) -> list[ImageDetections]:
        out = postprocess(raw, self.layout, letterbox, self.conf_threshold, self.iou_threshold,
                          self.max_detections)
        return [
            ImageDetections(out.boxes[i, :n], out.scores[i, :n], out.classes[i, :n])
            for i, n in enumerate(out.num_detections[:, 0])
        ]
