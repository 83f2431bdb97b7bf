import numpy as np
import onnx
import pytest

from generator.builder.stages.precision.errors import PrecisionError
from generator.builder.stages.precision.fp16 import convert_fp16, fp32_node_names
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
