"""One ONNX graph input or output as the generator reads it."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import TensorProto, helper

# ONNX element type -> Triton data type name.
TRITON_DTYPES: dict[int, str] = {
    TensorProto.FLOAT: "TYPE_FP32",
    TensorProto.FLOAT16: "TYPE_FP16",
    TensorProto.UINT8: "TYPE_UINT8",
    TensorProto.INT8: "TYPE_INT8",
    TensorProto.INT32: "TYPE_INT32",
    TensorProto.INT64: "TYPE_INT64",
    TensorProto.BFLOAT16: "TYPE_BF16",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    elem_type: int
    shape: tuple[int | str, ...]  # ints are fixed sizes, strings are symbolic (dynamic) axes

    @property
    def triton_dtype(self) -> str:
        return TRITON_DTYPES[self.elem_type]

    @property
    def numpy_dtype(self) -> str:
        return helper.tensor_dtype_to_np_dtype(self.elem_type).name
