"""Ultralytics' ``predict`` as a user runs it for N cameras: N processes, one ``YOLO(onnx)`` each.

Each stream of a ``versus`` window talks to its own worker process over a pipe (the JPEG's bytes in; out: the
decode time, ``Results.speed`` -- Ultralytics' own Profile of preprocess, inference and postprocess -- and the box
count), so the numbers are Ultralytics' without one interpreter lock shared by the streams, and the stages come from
Ultralytics' own timers with the decode (``cv2.imdecode``, full resolution) timed apart.

A session with ONNX Runtime's default thread count pins one worker to every physical core of the machine, which
leaves a ``taskset`` pinning (``reference.py``). The workers therefore make Ultralytics' session with one intra-op
thread per CPU of their affinity mask, what the default gives on a machine of exactly those cores; nothing else of
Ultralytics changes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Infer = Callable[[bytes], Any]
START_TIMEOUT_S = 300.0


@contextlib.contextmanager
def session_threads(count: int) -> Iterator[None]:
    """While inside, ONNX Runtime sessions made with the default (0) intra-op threads get ``count`` instead."""
    import onnxruntime

    original = onnxruntime.InferenceSession

    def make(path: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        options = sess_options or onnxruntime.SessionOptions()
        if options.intra_op_num_threads == 0:
            options.intra_op_num_threads = count
        return original(path, options, *args, **kwargs)

    onnxruntime.InferenceSession = make
    try:
        yield
    finally:
        onnxruntime.InferenceSession = original


@dataclass(frozen=True)
class PredictSettings:
    onnx: str
    conf: float
    iou: float
    max_detections: int
    image_size: tuple[int, int]


def _predict_loop(conn: Any, settings: PredictSettings) -> None:
    """The worker: load and warm the model, then answer frames until the pipe closes."""
    import cv2
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="ultralytics-config-") as config:
        os.environ.update(YOLO_CONFIG_DIR=config, YOLO_OFFLINE="1", YOLO_AUTOINSTALL="false", YOLO_VERBOSE="false")
        from ultralytics import YOLO

        options = {"conf": settings.conf, "iou": settings.iou, "max_det": settings.max_detections,
                   "imgsz": list(settings.image_size), "device": "cpu", "verbose": False}
        with session_threads(len(os.sched_getaffinity(0))):  # the session is made on the first predict
            model = YOLO(settings.onnx, task="detect")
            model.predict(np.zeros((*settings.image_size, 3), np.uint8), **options)
        conn.send("ready")
        while True:
            try:
                data = conn.recv_bytes()
            except EOFError:
                return
            try:
                start = time.perf_counter()
                frame = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
                decode_ms = (time.perf_counter() - start) * 1000.0
                result = model.predict(frame, **options)[0]
                conn.send((decode_ms, dict(result.speed), len(result.boxes)))
            except Exception as exc:  # noqa: BLE001 -- the caller raises it as this frame's failure
                conn.send(f"{type(exc).__name__}: {exc}")


def _run_worker(conn: Any, settings: PredictSettings) -> None:
    try:
        _predict_loop(conn, settings)
    except Exception as exc:  # noqa: BLE001 -- a load failure goes back to the parent as text
        with contextlib.suppress(OSError):
            conn.send(f"{type(exc).__name__}: {exc}")


class UltralyticsProcesses:
    """``YOLO(onnx).predict`` in one worker process per stream, started on first use and kept until ``close``."""

    def __init__(self, onnx_path: Path, settings: PredictSettings) -> None:
        from importlib import metadata

        self.version = metadata.version("ultralytics")
        self.settings = settings
        self._workers: list[tuple[Any, Any, threading.Lock]] = []
        self._lock = threading.Lock()
        self.stages: list[tuple[float, dict[str, float]]] = []  # (decode ms, Results.speed) of every frame

    def _worker(self, index: int) -> tuple[Any, threading.Lock]:
        with self._lock:
            while len(self._workers) <= index:
                context = multiprocessing.get_context("spawn")  # no fork of a process running ORT threads
                parent, child = context.Pipe()
                process = context.Process(target=_run_worker, args=(child, self.settings), daemon=True)
                process.start()
                if not parent.poll(START_TIMEOUT_S) or (answer := parent.recv()) != "ready":
                    process.kill()
                    raise RuntimeError(f"the Ultralytics worker did not start: {locals().get('answer', 'timeout')}")
                self._workers.append((process, parent, threading.Lock()))
            _, conn, lock = self._workers[index]
            return conn, lock

    def factory(self) -> Callable[[], Infer]:
        """A maker for ``closed_loop``: the n-th thread of a window talks to the n-th worker."""
        counter = iter(range(1 << 30))
        lock = threading.Lock()

        def make() -> Infer:
            with lock:
                index = next(counter)
            conn, busy = self._worker(index)

            def infer(data: bytes) -> Any:
                with busy:
                    conn.send_bytes(data)
                    answer = conn.recv()
                if isinstance(answer, str):
                    raise RuntimeError(answer)
                self.stages.append((answer[0], answer[1]))
                return answer

            return infer

        return make

    def cpu_s(self) -> float:
        """CPU seconds of the worker processes."""
        from .versus import process_cpu_s

        return sum(process_cpu_s(process.pid) for process, _, _ in self._workers)

    def close(self) -> None:
        for process, conn, _ in self._workers:
            conn.close()
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
        self._workers.clear()
