"""What a user's script does with the same ONNX in one process: the reference the served ensemble is held to.

``InProcessPipeline``: decode the JPEG at full resolution (OpenCV, its default threads), letterbox it the way
Ultralytics does, normalise to float NCHW RGB /255, run the exported ONNX in one ONNX Runtime session, decode the
head and run class-aware NMS in numpy (the project's own vectorised code, with the repository's thresholds).
Concurrent streams share the one session, as threads of a script do.

The session is what ``ort.InferenceSession(path)`` gives a script on a machine of exactly the cores this process
may use: one intra-op thread per core of its affinity mask (``len(os.sched_getaffinity(0))``), spinning workers
(ONNX Runtime's default). It does not leave the thread count at 0: ONNX Runtime's own default counts the whole
machine's physical cores and pins one thread to each, which overrides ``taskset`` (``versus --cores`` pins each
core count that way), so on a 16-core host a reference "pinned to 4 cores" ran on all 16. With an explicit count
no affinity is set and the threads stay inside the mask (``generator.serving.runner.OnnxRunner``).

Ultralytics' ``predict`` is measured by ``ultralytics_procs.py`` (one worker process per stream), when Ultralytics
and a CPU torch are installed (``pip install -e '.[reference]'``); ``ultralytics_missing`` says why it is not.
"""

from __future__ import annotations

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
    """Decode, letterbox, ONNX Runtime (a thread per usable core, spinning), NMS: one call per frame, safe to call
    from several threads."""

    def __init__(self, onnx_path: Path, thresholds: Thresholds) -> None:
        from generator.model.onnx_inspect import inspect_onnx
        from generator.model.tasks import require_detect
        from generator.serving.runner import OnnxRunner, usable_cores

        self.info = inspect_onnx(onnx_path)
        require_detect(self.info.task, "the load test's in-process reference")
        self.thresholds = thresholds
        # One thread per core of this process's mask (0: OnnxRunner counts them), workers spinning.
        self.threads = usable_cores()
        self.runner = OnnxRunner(str(onnx_path), intra_op_threads=self.threads, spin_wait=True)
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

