"""A platform model's I/O as the Triton backend that loads it will see it.

The ONNX Runtime backend compares its config with what an ONNX Runtime session reports for the file
(shapes after ONNX Runtime's own shape inference, symbolic dims as -1); the TensorRT backend compares it
with the engine's I/O tensors and optimization profiles. :mod:`generator.builder.stages.config.load_rules`
checks configs against these descriptions, so both are produced here by the same means the backends use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from generator.errors import ConfigError

Shape = tuple[int, ...]

# ONNX Runtime's type strings -> Triton data types (onnxruntime_utils.cc ConvertFromOnnxDataType).
ORT_TO_TRITON = {
    "tensor(float)": "TYPE_FP32", "tensor(float16)": "TYPE_FP16", "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16", "tensor(uint8)": "TYPE_UINT8", "tensor(int8)": "TYPE_INT8",
    "tensor(uint16)": "TYPE_UINT16", "tensor(int16)": "TYPE_INT16", "tensor(uint32)": "TYPE_UINT32",
    "tensor(int32)": "TYPE_INT32", "tensor(uint64)": "TYPE_UINT64", "tensor(int64)": "TYPE_INT64",
    "tensor(bool)": "TYPE_BOOL", "tensor(string)": "TYPE_STRING",
}


@dataclass(frozen=True)
class ModelTensor:
    """One model input or output: full shape (batch included), -1 where dynamic."""

    name: str
    data_type: str  # Triton TYPE_*
    shape: Shape
    profile: tuple[Shape, Shape, Shape] | None = None  # TensorRT engine inputs: (min, opt, max)


@dataclass(frozen=True)
class ModelIO:
    inputs: tuple[ModelTensor, ...]
    outputs: tuple[ModelTensor, ...]

    def input(self, name: str) -> ModelTensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> ModelTensor | None:
        return next((t for t in self.outputs if t.name == name), None)


def _ort_tensors(args: Iterable[object]) -> tuple[ModelTensor, ...]:
    tensors = []
    for arg in args:
        name, kind, shape = arg.name, arg.type, arg.shape  # type: ignore[attr-defined]
        if kind not in ORT_TO_TRITON:
            raise ConfigError(f"ONNX tensor '{name}' has type {kind}, which Triton's ONNX Runtime backend cannot "
                              "serve (Unsupported ONNX Type)")
        dims = tuple(d if isinstance(d, int) and d > 0 else -1 for d in shape)
        tensors.append(ModelTensor(name, ORT_TO_TRITON[kind], dims))
    return tuple(tensors)


def onnxruntime_io(model: bytes) -> ModelIO:
    """What an ONNX Runtime session reports for ``model`` (serialized ONNX): the backend's view."""
    import onnxruntime as ort

    from generator.serving.runner import usable_cores

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = usable_cores()  # not 0: ONNX Runtime would pin threads outside taskset
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own unrelated types for files it cannot load
        raise ConfigError(f"ONNX Runtime cannot load the served detector graph: {exc}") from exc
    return ModelIO(_ort_tensors(session.get_inputs()), _ort_tensors(session.get_outputs()))
