"""The precision stage's option handling: which float type INT8 leaves, and impossible combinations."""

from __future__ import annotations

import pytest

from generator.builder.spec.options import BuildOptions, PrecisionOptions, SpecError
from generator.builder.stages.precision.step import int8_float_dtype


@pytest.mark.parametrize(("target", "asked", "expected"), [
    ("embedded", "auto", "fp16"),
    ("tensorrt", "auto", "fp16"),
    ("onnxruntime", "auto", "fp32"),  # the NGC containers' ONNX Runtime truncates FP16 QuantizeLinear
    ("onnxruntime", "fp16", "fp16"),
    ("tensorrt", "fp32", "fp32"),
])
def test_int8_float_dtype(target, asked, expected):
    precision = PrecisionOptions(int8_float=asked)
    assert int8_float_dtype(precision, BuildOptions(target=target, calibration=precision)) == expected


def test_modelopt_has_no_percentile_calibration():
    with pytest.raises(SpecError, match="--int8-tool modelopt calibrates with --calib-method minmax or entropy"):
        PrecisionOptions(int8_tool="modelopt", calib_method="percentile")
    with pytest.raises(SpecError, match="--int8-tool"):
        PrecisionOptions(int8_tool="tensorrt")  # type: ignore[arg-type]
