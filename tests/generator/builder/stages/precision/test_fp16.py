import numpy as np
import onnx
import pytest

from generator.builder.stages.precision.errors import PrecisionError
from generator.builder.stages.precision.fp16 import convert_fp16, convert_fp16_report, fp32_node_names
from generator.builder.stages.precision.head import find_detection_head
from tests.generator.builder.stages.precision.toy_detector import run


@pytest.fixture(scope="module")
def fp16_model(toy_model):
    return convert_fp16(toy_model)


def test_io_stays_fp32_and_graph_is_valid(fp16_model):
    onnx.checker.check_model(fp16_model, full_check=True)
    assert fp16_model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert fp16_model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_body_is_fp16_and_head_tail_and_resize_stay_fp32(toy_model, fp16_model):
    fp32 = set(fp32_node_names(fp16_model))
    assert set(find_detection_head(toy_model).tail) <= fp32
    assert "up/Resize" in fp32
    assert {"c1/Conv", "c2/Conv", "c3/Conv", "cat/Concat"}.isdisjoint(fp32)
    halves = [i for i in fp16_model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    assert {"c2.weight", "c3.weight"} <= {i.name for i in halves}


def test_shared_initializer_is_split_between_fp16_body_and_fp32_head(fp16_model):
    types = {i.name: i.data_type for i in fp16_model.graph.initializer}
    assert types["shared.bias"] == onnx.TensorProto.FLOAT16
    assert types["shared.bias__fp32"] == onnx.TensorProto.FLOAT


def test_runs_on_onnxruntime_close_to_fp32(toy_model, fp16_model, scene_batches):
    x = scene_batches[0]
    ref = run(toy_model, x)
    out = run(fp16_model, x)
    assert out.dtype == np.float32 and out.shape == ref.shape
    np.testing.assert_allclose(out[:, 4:], ref[:, 4:], atol=2e-3)
    np.testing.assert_allclose(out[:, :4], ref[:, :4], rtol=1e-2)


def test_metadata_is_kept(toy_model, fp16_model):
    props = {p.key: p.value for p in fp16_model.metadata_props}
    assert props["names"] == {p.key: p.value for p in toy_model.metadata_props}["names"]
    assert props["triton_detection_ensemble.precision"] == "fp16"


def test_extra_fp32_nodes_and_unknown_names(toy_model):
    converted = convert_fp16(toy_model, keep_fp32_nodes=["c2/Conv"])
    assert "c2/Conv" in fp32_node_names(converted)
    with pytest.raises(PrecisionError, match="no/such"):
        convert_fp16(toy_model, keep_fp32_nodes=["no/such"])


def test_head_can_be_converted_too_when_asked(toy_model):
    converted = convert_fp16(toy_model, keep_head_fp32=False)
    assert "head/cls/Conv" not in fp32_node_names(converted)
    onnx.checker.check_model(converted, full_check=True)


def feature_read_by_body_and_head(toy_model):
    """The toy with one more body stage between c3 and the box conv: c3 then feeds the FP32 head tail (class
    conv) and an FP16 body node, like a YOLOv8n export's P3-P5 features (head and next stage)."""
    from onnx import helper, numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(toy_model)
    graph = model.graph
    weight = np.random.default_rng(1).standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.3
    graph.initializer.append(numpy_helper.from_array(weight, "c4.weight"))
    stage = [helper.make_node("Conv", ["c3_out", "c4.weight"], ["c4_conv"], name="c4/Conv", kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["c4_conv"], ["c4_sig"], name="c4/Sigmoid"),
             helper.make_node("Mul", ["c4_conv", "c4_sig"], ["c4_out"], name="c4/Mul")]
    (box,) = [n for n in graph.node if n.name == "head/box/Conv"]
    box.input[0] = "c4_out"
    position = list(graph.node).index(box)
    for offset, node in enumerate(stage):
        graph.node.insert(position + offset, node)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_feature_read_by_head_and_body_stays_fp16_in_the_body(toy_model, scene_batches):
    model = feature_read_by_body_and_head(toy_model)
    converted = convert_fp16(model)  # the converter used to wire its FP32 output Cast into c4/Conv as well
    onnx.checker.check_model(converted, full_check=True)
    assert "c4/Conv" not in fp32_node_names(converted)
    np.testing.assert_allclose(run(converted, scene_batches[0])[:, 4:], run(model, scene_batches[0])[:, 4:], atol=2e-3)


def _chain(first: list[onnx.NodeProto], weights: list[onnx.TensorProto]) -> onnx.ModelProto:
    """images -> first nodes -> Relu -> y, 3x8x8 float, opset 17: small graphs that trip the converter."""
    from onnx import TensorProto, helper

    nodes = [*first, helper.make_node("Relu", [first[-1].output[0]], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
                              initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv(name: str, source: str, weight: str = "W") -> onnx.NodeProto:
    return onnx.helper.make_node("Conv", [source, weight, "B"], [name], name=name, pads=[1, 1, 1, 1])


def _weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(3)
    return [onnx.numpy_helper.from_array((rng.standard_normal((3, 3, 3, 3)) * 0.2).astype(np.float32), "W"),
            onnx.numpy_helper.from_array(np.zeros(3, np.float32), "B")]


def test_a_node_kept_in_fp32_gets_its_own_copy_of_weights_it_shares() -> None:
    """onnxslim merges equal initializers (every zero bias), and the converter made the shared copy FP16 for
    the kept node too: "(op_type:Conv, node name: c1): W has inconsistent type"."""
    model = _chain([_conv("c1", "images"), _conv("c2", "c1"), _conv("c3", "c2")], _weights())
    result = convert_fp16_report(model, keep_fp32_nodes=["c2"], keep_head_fp32=False)
    assert result.fallback == ()
    onnx.checker.check_model(result.model, full_check=True)
    c2 = next(n for n in result.model.graph.node if n.name == "c2")
    types = {i.name: i.data_type for i in result.model.graph.initializer}
    assert types[c2.input[1]] == onnx.TensorProto.FLOAT and types["W"] == onnx.TensorProto.FLOAT16
    x = np.random.default_rng(4).random((1, 3, 8, 8), dtype=np.float32)
    np.testing.assert_allclose(run(result.model, x), run(model, x), atol=5e-3)


def test_a_node_the_converter_leaves_inconsistent_stays_fp32_and_is_reported() -> None:
    """RandomNormalLike's ``dtype`` attribute keeps its output FP32, which the converter does not see: the Add
    reading it and an FP16 tensor is kept in FP32 instead of failing the build."""
    from onnx import TensorProto, helper

    noise = helper.make_node("RandomNormalLike", ["c1"], ["noise"], name="noise", dtype=TensorProto.FLOAT,
                             scale=0.0)
    add = helper.make_node("Add", ["c1", "noise"], ["sum"], name="add")
    model = _chain([_conv("c1", "images"), noise, add, _conv("c2", "sum")], _weights())
    with pytest.raises(onnx.shape_inference.InferenceError):  # what the converter alone gives
        from onnxconverter_common import float16

        onnx.checker.check_model(float16.convert_float_to_float16(model, keep_io_types=True), full_check=True)
    result = convert_fp16_report(model, keep_head_fp32=False)
    assert [f.node for f in result.fallback] == ["add"]
    assert "inconsistent type" in result.fallback[0].reason
    onnx.checker.check_model(result.model, full_check=True)
    assert "add" in fp32_node_names(result.model) and "c2" not in fp32_node_names(result.model)
