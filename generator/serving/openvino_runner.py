"""Run the served ONNX detector with OpenVINO's CPU plugin (``--cpu-engine openvino``), as ``OnnxRunner`` does.

The same graph, read from the same ONNX file, on another CPU engine: OpenVINO compiles it once per instance and
runs it through one infer request. Its precision is pinned to f32 (``INFERENCE_PRECISION_HINT``): on CPUs with AMX
or AVX512-FP16 the plugin would otherwise pick bf16 or f16 by itself, detections the accuracy gate never saw. What
the plugin computes may still differ from ONNX Runtime in the last bits (other kernels, other fusions), so the
detector checks it on the build's control images at load, as it checks the CUDA provider
(``ensemble_pipeline.provider_check``).

Threads: the requested count (``INFERENCE_NUM_THREADS``, by default every core of this process for each of the two
detector instances, as for ONNX Runtime); no pinning of threads to cores (``ENABLE_CPU_PINNING``), which two
instances on the same cores would fight over; one stream (the ``LATENCY`` hint): a batch runs on every thread.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .phases import Lap, no_lap
from .runner import INPUT_DTYPES, chunks, padded, usable_cores

ENGINE_PARAMETER = "cpu_engine"  # the detector config's parameter; absent: ONNX Runtime
OPENVINO = "openvino"
OPENVINO_VERSION = "2026.4.1"  # the stub-openvino lock's pin (generator/server/locks/stub-openvino.in)
_ONNX_TYPES = {"u8": "tensor(uint8)", "f16": "tensor(float16)", "f32": "tensor(float)"}


class OpenVinoMissing(RuntimeError):
    """The detector was built for OpenVINO and the serving environment has no ``openvino`` package."""


def compile_settings(threads: int) -> dict[str, Any]:
    """The CPU plugin's properties for one detector instance of ``threads`` threads."""
    return {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
            "ENABLE_CPU_PINNING": False}


class OpenVinoRunner:
    """One compiled model and its infer request. ``threads``: that many, or one per core of this process (0)."""

    def __init__(self, path: str, threads: int = 0) -> None:
        try:
            import openvino as ov  # heavy; only a detector built with --cpu-engine openvino needs it
        except ImportError as exc:
            raise OpenVinoMissing(
                f"this detector was built with --cpu-engine openvino and the server's Python environment has no "
                f"openvino package: serve with the openvino stub environment (python -m generator serve picks it "
                f"from the configs; the CPU image: docker compose build --build-arg STUB_ENV=openvino triton-cpu), "
                f"or pip install openvino=={OPENVINO_VERSION}, or rebuild with --cpu-engine onnxruntime") from exc
        core = ov.Core()
        model = core.read_model(path)
        self.version: str = ov.get_version()
        self.compiled: Any = core.compile_model(model, "CPU", compile_settings(threads if threads > 0 else usable_cores()))
        self._request: Any = self.compiled.create_infer_request()
        (model_input,) = model.inputs
        self.input_name: str = model_input.get_any_name()
        self.input_type: str = _ONNX_TYPES.get(model_input.get_element_type().get_type_name(), "tensor(float)")
        shape = model_input.get_partial_shape()
        self.input_shape: list[Any] = [d.get_length() if d.is_static else None for d in shape]
        self.output_names: list[str] = [o.get_any_name() for o in model.outputs]
        batch_dim = self.input_shape[0]
        self.static_batch: int | None = batch_dim if isinstance(batch_dim, int) else None

    def run(self, batch: Any, lap: Lap = no_lap) -> list[np.ndarray]:
        """Every output of ``batch`` (host array, leading batch axis) with the same leading size; ``lap`` ends the
        phase "run" of every chunk (runs of a static-batch export's size, the last one padded)."""
        size = len(batch)
        pieces = []
        for start, stop in chunks(size, self.static_batch):
            chunk = np.ascontiguousarray(padded(batch[start:stop], self.static_batch or stop - start))
            # share_outputs off: each result is a copy the request does not overwrite on its next run.
            results = self._request.infer({0: chunk}, share_inputs=True, share_outputs=False)
            pieces.append([results[output] for output in self.compiled.outputs])
            lap("run")
        if len(pieces) == 1 and len(pieces[0][0]) == size:
            return pieces[0]
        return [np.concatenate([p[i] for p in pieces])[:size] for i in range(len(self.output_names))]

    def warm_up(self, batch_sizes: tuple[int, ...] = (1,), item_shape: list[int] | None = None) -> list[int]:
        """Run a zero batch of each size (or the static size) once; none when the image size is unknown."""
        item = list(item_shape) if item_shape is not None else self.input_shape[1:]
        if not all(isinstance(d, int) for d in item):
            return []
        dtype = INPUT_DTYPES.get(self.input_type, np.float32)
        sizes = sorted({self.static_batch or s for s in batch_sizes})
        for size in sizes:
            self.run(np.zeros((size, *item), dtype=dtype))
        return sizes
