import onnx
from onnx import TensorProto, helper

from generator.builder.stages.precision.head import ensure_node_names, find_detection_head
from tests.generator.builder.stages.precision.toy_detector import build_toy_detector


def test_walk_stops_at_feature_convs_and_passes_through_the_dfl_conv():
    head = find_detection_head(build_toy_detector())
    assert head.final_convs == ("head/box/Conv", "head/cls/Conv")
    assert "head/dfl/Conv" in head.tail and "head/dfl/Softmax" in head.tail
    assert not any(name.startswith(("c1/", "c2/", "c3/", "up/", "cat/")) for name in head.tail)


def test_score_path_is_the_sigmoid_branch_only():
    head = find_detection_head(build_toy_detector())
    assert set(head.score_path) == {"head/cls/Conv", "head/cls/Reshape", "head/Sigmoid", "head/Concat"}


def test_unnamed_and_duplicate_nodes_get_unique_names():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Relu", ["b"], ["y"], name="r"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    named = ensure_node_names(model)
    names = [n.name for n in named.graph.node]
    assert len(set(names)) == 3 and all(names)
    assert names[1] == "r"
    assert model.graph.node[0].name == ""  # the input is not modified
    onnx.checker.check_model(named)
