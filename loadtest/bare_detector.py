"""The bare detector as a ``versus`` side: the repository's detector graph in this process, on frames already
letterboxed, one ONNX Runtime session as ``loadtest bench``'s raw detector makes it (a thread per usable core,
spinning). A lone served request is held to it: what the serving path adds is the served p50 over this one's."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .detector import served_detector
from .errors import LoadTestError

Infer = Callable[[bytes], Any]


class BareDetector:
    """One session shared by the streams; each call runs one letterboxed frame (the next of the prepared ones)."""

    def __init__(self, repository: Path, model: str, images: list[bytes]) -> None:
        from generator.serving.runner import OnnxRunner, usable_cores

        detector = served_detector(repository, model, images)
        if isinstance(detector, str):
            raise LoadTestError(f"no bare detector side: {detector}")
        self.graph, self.baseline = detector.onnx.path.name, detector.baseline
        self.threads = usable_cores()
        self.runner = OnnxRunner(str(detector.onnx.path), intra_op_threads=self.threads, spin_wait=True)
        self.inputs = [detector.prepared[i:i + 1] for i in range(len(detector.prepared))]
        self._next = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, _data: bytes) -> Any:
        with self._lock:
            index = next(self._next)
        return self.runner.run(self.inputs[index % len(self.inputs)])

    def factory(self) -> Callable[[], Infer]:
        return lambda: self

    def about(self) -> dict[str, Any]:
        return {"graph": self.graph, "baseline": self.baseline, "intra_op_threads": self.threads, "spinning": True,
                "input": "letterboxed frames (the decode and letterbox not counted)"}
