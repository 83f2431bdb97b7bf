"""The TensorRT parser check: what it rejects (real quantizer outputs and one graph per rule), what it accepts."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from generator.builder.stages.graph.prefix import add_normalisation_prefix
from generator.builder.stages.graph.suffix import add_class_reduction
from generator.builder.stages.precision.fp16 import convert_fp16
from generator.builder.stages.precision.int8 import Int8Options, quantize_int8
from generator.builder.stages.precision.tensorrt_compat import (
    TensorRTCompatibilityError,
    check_tensorrt_compatible,
    find_incompatibilities,
    quantization_summary,
)
from generator.demo import DEMO_ONNX
from generator.serving.batch import to_float_nchw
from generator.serving.letterbox import letterbox
from generator.synthetic import make_scene
from tests.fixtures.onnx_factory import make_detector


def _ort_quantize(model, batches, tmp_path, **kwargs):
    """ONNX Runtime's quantize_static as the project called it before issue 10 (QuantizeBias on)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(batches)

        def get_next(self):
            item = next(self.items, None)
            return None if item is None else {"images": item}

    output = tmp_path / "ort.onnx"
    # quantize_static rewrites a ModelProto it is given to point at external data in its temporary folder.
    quantize_static(onnx.ModelProto.FromString(model.SerializeToString()), output, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=kwargs.pop("activation_type", QuantType.QInt8), weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, **kwargs})
    return onnx.load(output)


def test_rejects_quantize_static_default_int32_bias(toy_model, scene_batches, tmp_path):
    quantized = _ort_quantize(toy_model, scene_batches[:2], tmp_path)
    found = find_incompatibilities(quantized)
    int32 = [f for f in found if "is INT32" in f.problem]
    assert int32, found
    assert all(f.op_type == "DequantizeLinear" and "QuantizeBias=False" in f.fix for f in int32)
    with pytest.raises(TensorRTCompatibilityError, match=r"node '.*bias.*' \(DequantizeLinear\): input .* is INT32"):
        check_tensorrt_compatible(quantized, "INT8 graph")


def test_rejects_asymmetric_uint8_activations(toy_model, scene_batches, tmp_path):
    from onnxruntime.quantization import QuantType

    quantized = _ort_quantize(toy_model, scene_batches[:2], tmp_path, QuantizeBias=False,
                              ActivationSymmetric=False, activation_type=QuantType.QUInt8)
    problems = {f.problem.split("'")[0] for f in find_incompatibilities(quantized)}
    assert "zero point " in problems and "output " in problems  # non-zero zero points, UINT8 Q outputs
    assert any("UINT8 inside the network" in f.problem for f in find_incompatibilities(quantized))


def test_rejects_qoperator_format(toy_model, scene_batches, tmp_path):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    reader_items = iter(scene_batches[:2])

    class Reader:
        def get_next(self):
            item = next(reader_items, None)
            return None if item is None else {"images": item}

    quantize_static(onnx.ModelProto.FromString(toy_model.SerializeToString()), tmp_path / "qop.onnx", Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    found = find_incompatibilities(onnx.load(tmp_path / "qop.onnx"))
    assert any(f.op_type == "QLinearConv" and "use Q/DQ" in f.fix for f in found)


@pytest.fixture(scope="module")
def int8_toy(toy_model, scene_batches, tmp_path_factory):
    return quantize_int8(toy_model, scene_batches, cache_dir=tmp_path_factory.mktemp("calib"), progress=None)


def test_accepts_the_int8_path_and_its_served_graph(int8_toy):
    assert find_incompatibilities(int8_toy.model) == []
    assert "INT32" not in quantization_summary(int8_toy.model)
    served = add_class_reduction(add_normalisation_prefix(int8_toy.model))
    assert find_incompatibilities(served) == []


def test_accepts_fp16(toy_model):
    converted = convert_fp16(toy_model)
    assert find_incompatibilities(converted) == []
    assert find_incompatibilities(add_class_reduction(add_normalisation_prefix(converted))) == []


@pytest.mark.slow
def test_accepts_the_demo_detector_int8(tmp_path):
    model = onnx.load(str(DEMO_ONNX))
    size = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[2:])
    rng = np.random.default_rng(3)
    batches = [to_float_nchw(letterbox(make_scene(rng, 640, 480).image[..., ::-1], size)[0][None])
               for _ in range(4)]
    result = quantize_int8(model, batches, cache_dir=tmp_path, progress=None)
    assert re.fullmatch(r"\d+ QuantizeLinear, \d+ DequantizeLinear \(inputs: INT8 \d+\)",
                        quantization_summary(result.model))
    assert find_incompatibilities(add_class_reduction(add_normalisation_prefix(result.model))) == []


@pytest.mark.parametrize("head", ["v8", "v5", "end2end"])
@pytest.mark.parametrize("batch", [1, "batch"])
def test_accepts_factory_detectors(head, batch, tmp_path):
    model = make_detector(head=head, batch=batch)
    rng = np.random.default_rng(0)
    batches = [rng.random((1, 3, 64, 64), dtype=np.float32) for _ in range(3)]
    # The factory detector is a single conv: keep the head in the quantization or nothing is quantized.
    result = quantize_int8(model, batches, Int8Options(exclude_head=False), cache_dir=tmp_path, progress=None)
    assert re.fullmatch(r"1 QuantizeLinear, 2 DequantizeLinear \(inputs: INT8 2\)", quantization_summary(result.model))
    assert find_incompatibilities(result.model) == []
    assert find_incompatibilities(convert_fp16(model)) == []


def _graph(nodes, inputs, outputs, inits=(), opset=19):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _value(name, elem=TensorProto.FLOAT, shape=(1, 4, 8, 8)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _qdq(scale, zero, axis=1):
    """x -> Q -> DQ -> y with the given per-tensor or per-channel parameters."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q", axis=axis),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq", axis=axis)]
    return _graph(nodes, [_value("x")], [_value("y")], [_const("s", scale), _const("z", zero)])


@pytest.mark.parametrize(("model", "expected"), [
    (_qdq(np.float32(0.1), np.int8(0)), None),
    (_qdq(np.float32(0.1), np.int8(3)), "zero point 'z' is not all zeros"),
    (_qdq(np.float32(-0.1), np.int8(0)), "not finite and positive"),
    (_qdq(np.full(4, 0.1, np.float32), np.zeros(4, np.int8)), "per-channel scale on activation"),
    (_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], [_value("x")], [_value("y")], opset=26),
     "opset 26 is outside"),
    (_graph([helper.make_node("TopK", ["x", "k"], ["y", "i"], name="t", axis=-1)],
            [_value("x", shape=(1, 5000))], [_value("y", shape=(1, 4000)), _value("i", TensorProto.INT64, (1, 4000))],
            [_const("k", np.array([4000], np.int64))]), "K = 4000"),
    (_graph([helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Slice", ["shape", "start", "end"], ["axes"], name="axes"),
             helper.make_node("ReduceMax", ["x", "axes"], ["y"], name="rmax", keepdims=1)],
            [_value("x")], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [_const("start", np.array([1], np.int64)), _const("end", np.array([2], np.int64))]),
     "'axes' input 'axes' is computed at run time"),
    (_graph([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="cubic")],
            [_value("x")], [_value("y", shape=(1, 4, 16, 16))], [_const("scales", np.array([1, 1, 2, 2], np.float32))]),
     "mode 'cubic'"),
    (_graph([helper.make_node("Unique", ["x"], ["y"], name="u")], [_value("x", shape=(8,))], [_value("y", shape=(None,))]),
     "operator not supported"),
])
def test_rules(model, expected):
    found = find_incompatibilities(model)
    if expected is None:
        assert found == []
    else:
        assert found and all(expected in str(f) for f in found), found  # a Q/DQ pair reports both nodes


def test_per_channel_weight_axis_must_match_the_channels():
    weight = np.ones((4, 4, 1, 1), np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], name="w_dq", axis=0),
             helper.make_node("Conv", ["x", "wf"], ["y"], name="conv")]

    def model(channels):
        inits = [_const("w", weight), _const("s", np.full(channels, 0.1, np.float32)),
                 _const("z", np.zeros(channels, np.int8))]
        return _graph(nodes, [_value("x")], [_value("y")], inits)

    assert find_incompatibilities(model(4)) == []
    (problem,) = find_incompatibilities(model(3))
    assert problem.node == "w_dq" and "3 scales for 4 channels on axis 0" in problem.problem
