"""Run an ONNX detector with ONNX Runtime on any batch size, static-batch exports included.

Ultralytics exports default to a static batch of 1 (or a fixed N); under Triton's dynamic batching the
model still receives any number of images, so batches are cut into chunks of the static size and the
last chunk is padded.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def session_threads(requested: int, instances: int) -> int:
    """Intra-op threads of one session: as requested, or this process's cores shared by the instances.

    Each detector instance is a separate process with its own session; sessions that each take every core
    oversubscribe the machine as soon as two instances run at once.
    """
    if requested > 0:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, instances))


class OnnxRunner:
    def __init__(self, path: str, intra_op_threads: int = 0, inter_op_threads: int = 1,
                 spin_wait: bool = False) -> None:
        import onnxruntime as ort  # heavy; only the detector step needs it

        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = inter_op_threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning worker threads burn the cores the preprocess and NMS steps need between batches;
        # ``spin_wait`` (ONNX Runtime's default) is for raw-detector references only.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
        self._session: Any = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        (model_input,) = self._session.get_inputs()
        self.input_name: str = model_input.name
        self.input_type: str = model_input.type
        self.output_names: list[str] = [o.name for o in self._session.get_outputs()]
        batch_dim = model_input.shape[0]
        self.static_batch: int | None = batch_dim if isinstance(batch_dim, int) else None

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        """Run ``batch`` (leading batch axis) and return every output with the same leading size."""
        size = len(batch)
        if self.static_batch is None or self.static_batch == size:
            return list(self._session.run(self.output_names, {self.input_name: batch}))
        step = self.static_batch
        pieces: list[list[np.ndarray]] = []
        for start in range(0, size, step):
            chunk = batch[start : start + step]
            if len(chunk) < step:
                padding = np.zeros((step - len(chunk), *chunk.shape[1:]), dtype=chunk.dtype)
                chunk = np.concatenate([chunk, padding])
            pieces.append(self._session.run(self.output_names, {self.input_name: chunk}))
        return [np.concatenate([p[i] for p in pieces])[:size] for i in range(len(self.output_names))]
