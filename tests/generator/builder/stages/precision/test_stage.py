"""The precision stage's option handling: which float type INT8 leaves, and impossible combinations."""

from __future__ import annotations

import pytest

from generator.builder.spec.options import BuildOptions, PrecisionOptions, SpecError
from generator.builder.stages.precision.stage import int8_float_dtype, make_precision_transform


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


def test_fp16_step_records_the_nodes_it_kept_in_fp32_and_why():
    """The manifest's precision facts name each node the conversion had to keep in FP32, with the reason."""
    import json

    from onnx import TensorProto, helper

    from tests.generator.builder.stages.precision.test_fp16 import _chain, _conv, _weights

    noise = helper.make_node("RandomNormalLike", ["c1"], ["noise"], name="noise", dtype=TensorProto.FLOAT,
                             scale=0.0)
    add = helper.make_node("Add", ["c1", "noise"], ["sum"], name="add")
    model = _chain([_conv("c1", "images"), noise, add, _conv("c2", "sum")], _weights())
    options = BuildOptions(precision="fp16")
    _, facts = make_precision_transform(options.calibration)(model, None, options)  # type: ignore[arg-type]
    assert facts["fp32_fallback_nodes"] == "add"
    assert "B has inconsistent type tensor(float)" in json.loads(facts["fp32_fallback_reasons"])["add"]
