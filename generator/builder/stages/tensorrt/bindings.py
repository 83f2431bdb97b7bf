"""Derive the detector's Triton config fields from the built engine, not from the user's flags.

"configuration specified max-batch 16 but TensorRT engine only supports max-batch 1" (server
#7056) happens when the config is written from intentions. Here names, dtypes, dims and
``max_batch_size`` are read off the engine's I/O tensors and its optimization profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from generator.builder.stages.config.model_io import ModelIO, ModelTensor
from generator.builder.stages.tensorrt.errors import BindingError

if TYPE_CHECKING:
    import tensorrt as trt

# TensorRT DataType names -> Triton config data types.
TRT_TO_TRITON: Mapping[str, str] = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}


@dataclass(frozen=True)
class TensorDesc:
    """One engine I/O tensor as TensorRT reports it (-1 marks a dynamic dim).

    ``profile`` holds the (min, opt, max) shapes of an input in the selected profile.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    is_input: bool
    profile: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "is_input": self.is_input,
        }
        if self.profile is not None:
            data["profile"] = [list(s) for s in self.profile]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorDesc:
        profile = data.get("profile")
        return cls(
            name=str(data["name"]),
            dtype=str(data["dtype"]),
            shape=tuple(int(v) for v in data["shape"]),
            is_input=bool(data["is_input"]),
            profile=None if profile is None else (tuple(profile[0]), tuple(profile[1]), tuple(profile[2])),
        )


@dataclass(frozen=True)
class TritonTensor:
    """A config.pbtxt ``input``/``output`` entry; dims exclude the batch dim."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class DetectorBindings:
    """The detector config fields that must agree with the plan."""

    inputs: tuple[TritonTensor, ...]
    outputs: tuple[TritonTensor, ...]
    max_batch_size: int


def triton_data_type(trt_dtype: str) -> str:
    """Map a TensorRT DataType name (``FLOAT``, ``HALF``...) to a Triton ``TYPE_*``."""
    try:
        return TRT_TO_TRITON[trt_dtype]
    except KeyError:
        raise BindingError(
            f"engine tensor type {trt_dtype} has no Triton equivalent; keep the engine's I/O in FP32/FP16"
        ) from None


def derive_detector_bindings(tensors: Sequence[TensorDesc]) -> DetectorBindings:
    """Triton config fields for an explicit-batch engine's I/O tensors.

    A dynamic batch dim gives ``max_batch_size`` = the profile's max batch (min must be 1: the
    dynamic batcher sends any size). A fixed batch of 1 is served with ``max_batch_size`` 1;
    a larger fixed batch cannot be served by a batching Triton model and is rejected.
    """
    inputs = [t for t in tensors if t.is_input]
    outputs = [t for t in tensors if not t.is_input]
    if not inputs or not outputs:
        raise BindingError("the engine needs at least one input and one output tensor")

    batches = {_max_batch(t) for t in inputs}
    if len(batches) != 1:
        raise BindingError(f"engine inputs disagree on the batch size: {sorted(batches)}")
    max_batch = batches.pop()

    for tensor in outputs:
        if not tensor.shape:
            raise BindingError(f"output {tensor.name!r} is a scalar; it has no batch dim")
        if tensor.shape[0] not in (-1, max_batch):
            raise BindingError(
                f"output {tensor.name!r} has batch {tensor.shape[0]} but the inputs allow {max_batch}"
            )

    return DetectorBindings(
        inputs=tuple(TritonTensor(t.name, triton_data_type(t.dtype), _input_dims(t)) for t in inputs),
        outputs=tuple(TritonTensor(t.name, triton_data_type(t.dtype), t.shape[1:]) for t in outputs),
        max_batch_size=max_batch,
    )


def _max_batch(tensor: TensorDesc) -> int:
    if not tensor.shape:
        raise BindingError(f"input {tensor.name!r} is a scalar; it has no batch dim")
    batch = tensor.shape[0]
    if batch > 0:
        if batch != 1:
            raise BindingError(
                f"input {tensor.name!r} has a fixed batch of {batch}; Triton batches from 1 up, "
                "so rebuild from an ONNX with a dynamic batch"
            )
        return 1
    if tensor.profile is None:
        raise BindingError(f"input {tensor.name!r} has a dynamic batch but no optimization profile")
    low, _, high = tensor.profile
    if low[0] != 1:
        raise BindingError(
            f"input {tensor.name!r} profile starts at batch {low[0]}; it must start at 1 because "
            "Triton's dynamic batcher sends batches of any size"
        )
    return high[0]


def _input_dims(tensor: TensorDesc) -> tuple[int, ...]:
    """Non-batch dims; a dynamic dim whose profile pins it (min == max) is written as that size."""
    dims = list(tensor.shape[1:])
    if tensor.profile is not None:
        low, _, high = tensor.profile
        for index, dim in enumerate(dims, start=1):
            if dim == -1 and low[index] == high[index]:
                dims[index - 1] = low[index]
    return tuple(dims)


def describe_engine(engine: trt.ICudaEngine, profile_index: int = 0) -> list[TensorDesc]:
    """Read the I/O tensors of a deserialised engine (needs TensorRT and a GPU)."""
    import tensorrt as trt

    tensors: list[TensorDesc] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        profile: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
        if is_input:
            low, opt, high = engine.get_tensor_profile_shape(name, profile_index)
            profile = (_dims(low), _dims(opt), _dims(high))
        tensors.append(
            TensorDesc(
                name=name,
                dtype=engine.get_tensor_dtype(name).name,
                shape=_dims(engine.get_tensor_shape(name)),
                is_input=is_input,
                profile=profile,
            )
        )
    return tensors


def _dims(dims: trt.Dims) -> tuple[int, ...]:
    # The stubs give Dims __getitem__/__len__ but no __iter__.
    return tuple(dims[i] for i in range(len(dims)))


def engine_io(tensors: Sequence[TensorDesc]) -> ModelIO:
    """A TensorRT engine's I/O (as reported by the build, or as the build spec makes it) in Triton types."""

    def convert(tensor: TensorDesc) -> ModelTensor:
        # An unknown TensorRT type maps to TYPE_INVALID: the load rules then say what Triton would.
        return ModelTensor(tensor.name, TRT_TO_TRITON.get(tensor.dtype, "TYPE_INVALID"), tensor.shape,
                           tensor.profile)

    return ModelIO(tuple(convert(t) for t in tensors if t.is_input),
                   tuple(convert(t) for t in tensors if not t.is_input))
