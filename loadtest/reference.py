"""What a user's script does with the same ONNX in one process: the reference the served ensemble is held to.

``InProcessPipeline``: decode the JPEG at full resolution (OpenCV, its default threads), letterbox it the way
Ultralytics does, normalise to float NCHW RGB /255, run the exported ONNX in one ONNX Runtime session with its
defaults (every core of this process's affinity, spinning workers: what ``ort.InferenceSession(path)`` and
Ultralytics' ONNX backend give), decode the head and run class-aware NMS in numpy (the project's own vectorised
code, with the repository's thresholds). Concurrent streams share the one session, as threads of a script do.

``UltralyticsPipeline``: ``YOLO(onnx).predict`` on the decoded frame, one model per stream (Ultralytics' models
are not thread-safe). Only when Ultralytics and a CPU torch are installed (``pip install -e '.[reference]'``);
``ultralytics_missing`` says why it is not.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

Infer = Callable[[bytes], Any]


@dataclass(frozen=True)
class Thresholds:
    conf: float = 0.25
    iou: float = 0.45
    max_detections: int = 100


def _decode(data: bytes) -> np.ndarray:
    import cv2

    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("the reference could not decode an image")
    return image


class InProcessPipeline:
    """Decode, letterbox, ONNX Runtime (defaults), NMS: one call per frame, safe to call from several threads."""

    def __init__(self, onnx_path: Path, thresholds: Thresholds) -> None:
        from generator.model.onnx_inspect import inspect_onnx
        from generator.serving.runner import OnnxRunner

        self.info = inspect_onnx(onnx_path)
        self.thresholds = thresholds
        # ONNX Runtime's defaults: intra-op threads = the cores this process may use, workers spinning.
        self.runner = OnnxRunner(str(onnx_path), intra_op_threads=0, spin_wait=True)
        self.dtype = np.dtype(self.info.input.numpy_dtype)

    def __call__(self, data: bytes) -> Any:
        from generator.serving.batch import to_float_nchw
        from generator.serving.letterbox import letterbox
        from generator.serving.nms import postprocess

        boxed, placement = letterbox(_decode(data), self.info.image_size)
        raw = self.runner.run(to_float_nchw(boxed[None], self.dtype))[0]
        t = self.thresholds
        return postprocess(raw, self.info.layout, placement.as_array()[None], t.conf, t.iou, t.max_detections)

    def factory(self) -> Callable[[], Infer]:
        return lambda: self


def ultralytics_missing() -> str | None:
    """Why Ultralytics' ``predict`` cannot be measured here, or None when it can."""
    for package in ("ultralytics", "torch"):
        try:
            metadata.version(package)
        except metadata.PackageNotFoundError:
            return f"{package} is not installed (pip install -e '.[reference]' adds Ultralytics with a CPU torch)"
    return None


class UltralyticsPipeline:
    """``YOLO(onnx, task="detect").predict(frame)``, one model per stream, made on first use and kept."""

    def __init__(self, onnx_path: Path, thresholds: Thresholds, image_size: tuple[int, int]) -> None:
        # Before the import: no settings sync, no automatic installs, no downloads.
        self._config = tempfile.TemporaryDirectory(prefix="ultralytics-config-")
        os.environ.setdefault("YOLO_CONFIG_DIR", self._config.name)
        os.environ.setdefault("YOLO_OFFLINE", "1")
        os.environ.setdefault("YOLO_AUTOINSTALL", "false")
        os.environ.setdefault("YOLO_VERBOSE", "false")
        from ultralytics import YOLO

        self._yolo = YOLO
        self.version = metadata.version("ultralytics")
        self.onnx_path, self.thresholds, self.image_size = onnx_path, thresholds, image_size
        self._models: list[Any] = []
        self._lock = threading.Lock()

    def _model(self, index: int) -> Any:
        with self._lock:
            while len(self._models) <= index:
                self._models.append(self._yolo(str(self.onnx_path), task="detect"))
            return self._models[index]

    def factory(self) -> Callable[[], Infer]:
        """A maker for ``closed_loop``: the n-th thread of a window gets the n-th model."""
        counter = iter(range(1 << 30))
        lock = threading.Lock()

        def make() -> Infer:
            with lock:
                index = next(counter)
            model = self._model(index)
            t = self.thresholds

            def infer(data: bytes) -> Any:
                return model.predict(_decode(data), conf=t.conf, iou=t.iou, max_det=t.max_detections,
                                     imgsz=list(self.image_size), device="cpu", verbose=False)

            return infer

        return make
