"""The class reduction suffix: ONNX Runtime on the reduced graph == numpy's max/arg-max on the full head."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from generator.builder.stages.graph.prefix import SERVED_INPUT, add_normalisation_prefix
from generator.builder.stages.graph.suffix import REDUCED_OUTPUT, GraphSuffixError, add_class_reduction
from generator.serving.batch import to_float_nchw
from generator.serving.letterbox import Letterbox
from generator.serving.nms import postprocess
from tests.fixtures.onnx_factory import make_detector, ultralytics_metadata
from tests.generator.builder.stages.graph.helpers import head_model, run
from tests.generator.serving.helpers import assert_same_detections, reduce_v8

OPSETS = (11, 12, 13, 17, 18, 21)


def tied_heads(rng: np.random.Generator, batch: int, classes: int, anchors: int) -> np.ndarray:
    raw = rng.uniform(0, 640, (batch, 4 + classes, anchors)).astype(np.float32)
    raw[:, 4:, :] = rng.integers(0, 5, (batch, classes, anchors)) / 4  # most anchors have tied classes
    return raw


@pytest.mark.parametrize("opset", OPSETS)
def test_reduction_equals_numpy_max_and_first_argmax(opset: int) -> None:
    raw = tied_heads(np.random.default_rng(opset), 3, 80, 500)
    got = run(add_class_reduction(head_model(opset, shape=("batch", 84, "anchors"))), {"head": raw})
    assert got.shape == (3, 6, 500) and got.dtype == np.float32
    np.testing.assert_array_equal(got, reduce_v8(raw))
    ties = (raw[:, 4:, :] == raw[:, 4:, :].max(axis=1, keepdims=True)).sum(axis=1) > 1
    assert ties.mean() > 0.5


@pytest.mark.parametrize("opset", OPSETS)
def test_node_forms_follow_the_opset(opset: int) -> None:
    reduced = add_class_reduction(head_model(opset))
    nodes = {node.op_type: node for node in reduced.graph.node}
    argmax_attributes = {a.name: helper.get_attribute_value(a) for a in nodes["ArgMax"].attribute}
    assert argmax_attributes.get("select_last_index", 0) == 0
    assert ("select_last_index" in argmax_attributes) == (opset >= 12)
    sum_node = nodes["ReduceSum"]
    assert (len(sum_node.input) == 2) == (opset >= 13)
    assert any(a.name == "axes" for a in sum_node.attribute) == (opset < 13)
    assert not {"ReduceMax", "TopK"} & set(nodes)  # the score is gathered at the arg-max


def test_non_finite_scores_behave_like_the_v8_decode() -> None:
    classes = np.array([
        [0.9, 0.2, 0.3],  # plain
        [np.nan, 0.9, 0.3],  # NaN first, middle, last: ONNX Runtime's ArgMax alone would skip
        [0.9, np.nan, 0.3],  # the later ones, numpy (and so the v8 decode) drops the anchor
        [0.9, 0.3, np.nan],
        [np.nan, np.nan, np.nan],
        [0.2, np.inf, 0.3],
        [-np.inf, 0.8, 0.8],  # -inf is a low score; the tie still picks the first
        [-np.inf, -np.inf, -np.inf],
        [np.inf, -np.inf, 0.5],  # the NaN guard's sum turns this one NaN instead of inf: dropped either way
    ], dtype=np.float32).T
    anchors = classes.shape[1]
    raw = np.zeros((1, 7, anchors), dtype=np.float32)
    raw[0, 0] = np.arange(anchors) * 100 + 50
    raw[0, 1:4] = [[50], [20], [20]]
    raw[0, 4:] = classes
    got = run(add_class_reduction(head_model()), {"head": raw})
    expected = reduce_v8(raw)
    np.testing.assert_array_equal(got[:, :4], expected[:, :4])
    np.testing.assert_array_equal(got[0, 4, :-1], expected[0, 4, :-1])  # NaN where numpy's max is NaN
    assert expected[0, 4, -1] == np.inf and np.isnan(got[0, 4, -1])
    has_nan = np.isnan(got[0, 4])
    np.testing.assert_array_equal(got[0, 5, ~has_nan], expected[0, 5, ~has_nan])
    params = Letterbox(0, 0, 1, 1, 1000, 1000).as_array()[None]
    assert_same_detections(postprocess(got, "v8_reduced", params, 0.25, 0.45, 10),
                           postprocess(raw, "v8", params, 0.25, 0.45, 10))


@pytest.mark.parametrize("seed", range(4))
def test_reduced_graph_gives_the_v8_detections(seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = tied_heads(rng, 4, 5, 300)
    raw[:, 4:, :] *= rng.uniform(0, 1, (4, 1, 300)).astype(np.float32)  # scores around the threshold
    raw[rng.random(raw.shape) < 0.002] = np.nan
    params = np.tile(Letterbox(0, 0, 1, 1, 640, 640).as_array(), (4, 1))
    got = run(add_class_reduction(head_model(shape=("batch", 9, "anchors"))), {"head": raw})
    assert_same_detections(postprocess(got, "v8_reduced", params, 0.2, 0.45, 50),
                           postprocess(raw, "v8", params, 0.2, 0.45, 50))


def test_float16_head_stays_float16() -> None:
    raw = tied_heads(np.random.default_rng(5), 2, 6, 100).astype(np.float16)
    reduced = add_class_reduction(head_model(elem_type=TensorProto.FLOAT16, shape=(2, 10, 100)))
    assert reduced.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    got = run(reduced, {"head": raw})
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, reduce_v8(raw))


def test_served_detector_equals_the_original_reduced() -> None:
    original = make_detector("v8", num_classes=3, metadata=ultralytics_metadata(names=("a", "b", "c")), seed=5)
    before = original.SerializeToString()
    served = add_class_reduction(add_normalisation_prefix(original))
    assert original.SerializeToString() == before
    assert served.metadata_props == original.metadata_props
    (output,) = served.graph.output
    assert output.name == REDUCED_OUTPUT and output.type.tensor_type.elem_type == TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", 6, 64]
    images = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    expected = run(original, {"images": to_float_nchw(images)})
    np.testing.assert_array_equal(run(served, {SERVED_INPUT: images}), reduce_v8(expected))


def test_refuses_what_it_cannot_reduce() -> None:
    with pytest.raises(GraphSuffixError, match=r"opset >= 11.*--no-reduce-head"):
        add_class_reduction(head_model(opset=10))
    with pytest.raises(GraphSuffixError, match="4 rows"):
        add_class_reduction(head_model(shape=(1, 4, 10)))
    with pytest.raises(GraphSuffixError, match="already has a tensor named 'output0'"):
        add_class_reduction(head_model(), output_name="output0")
    with pytest.raises(GraphSuffixError, match="class ids above 2048"):
        add_class_reduction(head_model(elem_type=TensorProto.FLOAT16, shape=(1, 4 + 3000, 10)))
