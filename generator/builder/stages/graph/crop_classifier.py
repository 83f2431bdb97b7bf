"""Wrap a served classifier graph into a two-stage build's platform classifier step (ONNX Runtime, TensorRT).

The crop step sends every image's crops as one uint8 tensor [B, K, S, S, 3] (BGR, rows past the image's crop count
are zero) and the count [B, 1]. The wrapped graph flattens the crops to [B*K, S, S, 3] for the classifier's
normalisation prefix, takes each crop's top-k probabilities (ONNX TopK: equal values keep the lower class first, as
the embedded step's stable sort does) and returns them as [B, K, k] with the rows past the count zero, so the
served outputs equal the embedded step's. For ONNX Runtime it gathers the real crops first and classifies only
those, as the embedded step does; for TensorRT it keeps fixed shapes (every row classified, the padding's results
zeroed after): on ONNX Runtime's CPU the padding of a 20-box cap cost a median 7x an image with two boxes
(tools/classifier_step_bench.py, docs/PERFORMANCE.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from generator.builder.stages.graph.prefix import SERVED_INPUT
from generator.errors import GeneratorError
from generator.serving import contract

PREFIX = "crops_"
MIN_OPSET = 11  # TopK with k as an input and its lower-index tie order


class CropClassifierError(GeneratorError):
    """The classifier graph cannot be wrapped for the platform classifier step."""


def _dim(value: int | str) -> onnx.TensorShapeProto.Dimension:
    dim = onnx.TensorShapeProto.Dimension()
    if isinstance(value, int):
        dim.dim_value = value
    else:
        dim.dim_param = value
    return dim


def _value_info(name: str, elem_type: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    value = helper.make_tensor_value_info(name, elem_type, None)
    value.type.tensor_type.shape.dim.extend(_dim(d) for d in dims)
    return value


def _check(model: onnx.ModelProto) -> onnx.NodeProto:
    """The prefix's Cast that consumes the uint8 input (the wrapped input feeds it, still uint8: TensorRT takes a
    uint8 network input only where a Cast consumes it)."""
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < MIN_OPSET:
        raise CropClassifierError(f"the classifier step needs ONNX opset >= {MIN_OPSET}, the classifier has "
                                  f"{opset}; re-export it with a newer opset")
    if len(model.graph.output) != 1:
        raise CropClassifierError(f"a classify export has one output (probabilities), this one has "
                                  f"{len(model.graph.output)}")
    casts = [n for n in model.graph.node if n.op_type == "Cast" and list(n.input) == [SERVED_INPUT]]
    if len(casts) != 1:
        raise CropClassifierError(f"the classifier graph has no normalisation prefix (a Cast of '{SERVED_INPUT}')")
    return casts[0]


_EXTERNAL = {contract.CROPS, contract.CROP_COUNT}  # the step's inputs, named by the contract


def _node(op: str, inputs: list[str], output: str, **attrs: Any) -> onnx.NodeProto:
    """A node of the wrapper: its own tensor names get PREFIX (apart from the classifier's), the inputs keep theirs."""
    return helper.make_node(op, [i if i.startswith(PREFIX) or i in _EXTERNAL else PREFIX + i for i in inputs],
                            [PREFIX + output], name=PREFIX + output, **attrs)


def _constants(max_boxes: int, size: int, top_k: int) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(value, PREFIX + name) for name, value in (
        ("flat_shape", np.array([-1, size, size, 3], dtype=np.int64)),
        ("box_shape", np.array([-1, max_boxes, top_k], dtype=np.int64)),
        ("count_shape", np.array([-1, 1, 1], dtype=np.int64)),
        ("vector", np.array([-1], dtype=np.int64)),
        ("first", np.array([0], dtype=np.int64)),
        ("k", np.array([top_k], dtype=np.int64)),
        ("rows", np.arange(max_boxes, dtype=np.int32).reshape(1, max_boxes, 1)),
        ("zero_class", np.array(0, dtype=np.int32)),
        ("zero_score", np.array(0.0, dtype=np.float32)))]


def _real_rows() -> list[onnx.NodeProto]:
    """``real`` [B, K, 1]: row < the image's crop count."""
    return [_node("Reshape", [contract.CROP_COUNT, "count_shape"], "count"),
            _node("Less", ["rows", "count"], "real")]


def _top_k(probabilities: str) -> list[onnx.NodeProto]:
    """``top`` float32 and ``class`` int32 [N, k] of [N, nc] probabilities (ONNX TopK: ties keep the lower index)."""
    return [helper.make_node("Cast", [probabilities], [PREFIX + "probabilities"], to=TensorProto.FLOAT,
                             name=PREFIX + "probabilities"),
            helper.make_node("TopK", [PREFIX + "probabilities", PREFIX + "k"], [PREFIX + "top", PREFIX + "index"],
                             axis=-1, largest=1, sorted=1, name=PREFIX + "topk"),
            _node("Cast", ["index"], "class", to=TensorProto.INT32)]


def _padded(cast_output: str, probabilities: str) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """Every row classified (fixed shapes, as TensorRT plans them), the padding's results zeroed after."""
    head = [_node("Reshape", ["float", "flat_shape"], "flat")]
    head[0].output[0] = cast_output
    tail = [*_top_k(probabilities), *_real_rows(),
            _node("Reshape", ["class", "box_shape"], "box_class"), _node("Reshape", ["top", "box_shape"], "box_score"),
            _node("Where", ["real", "box_class", "zero_class"], "classes_out"),
            _node("Where", ["real", "box_score", "zero_score"], "scores_out")]
    return head, tail


def _real_only(probabilities: str) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """Only the real rows classified (gathered by the count, scattered back into zero rows), as the embedded step
    does: an image with two boxes costs two crops, not --classify-boxes. One row more is always run (the first, its
    result dropped): an Ultralytics classifier's graph cannot run an empty batch (its attention Reshape fails)."""
    head = [*_real_rows(), _node("Reshape", ["real", "vector"], "real_flat"),
            _node("NonZero", ["real_flat"], "where"), _node("Transpose", ["where"], "indices", perm=[1, 0]),
            _node("Reshape", ["where", "vector"], "picked"), _node("Concat", ["picked", "first"], "run", axis=0),
            _node("Reshape", [contract.CROPS, "flat_shape"], "all_crops"),
            _node("Gather", ["all_crops", "run"], "real_crops", axis=0)]
    tail = [*_top_k(probabilities), _node("Shape", ["picked"], "real_total"),
            _node("Slice", ["top", "first", "real_total", "first"], "real_top"),
            _node("Slice", ["class", "first", "real_total", "first"], "real_class"),
            _node("Shape", ["real_flat"], "rows_total"),
            _node("Concat", ["rows_total", "k"], "table_shape", axis=0),
            _node("ConstantOfShape", ["table_shape"], "class_table",
                  value=numpy_helper.from_array(np.array([0], dtype=np.int32))),
            _node("ConstantOfShape", ["table_shape"], "score_table",
                  value=numpy_helper.from_array(np.array([0.0], dtype=np.float32))),
            _node("ScatterND", ["class_table", "indices", "real_class"], "class_rows"),
            _node("ScatterND", ["score_table", "indices", "real_top"], "score_rows"),
            _node("Reshape", ["class_rows", "box_shape"], "classes_out"),
            _node("Reshape", ["score_rows", "box_shape"], "scores_out")]
    return head, tail


def wrap_crop_classifier(served: onnx.ModelProto, max_boxes: int, size: int, top_k: int,
                         real_only: bool = False) -> onnx.ModelProto:
    """Return a copy of ``served`` (a classifier with its normalisation prefix: uint8 [N, S, S, 3] in, [N, nc]
    probabilities out) taking contract.CROPS [B, max_boxes, size, size, 3] uint8 and contract.CROP_COUNT [B, 1]
    int32, returning contract.BOX_CLASSES int32 and contract.BOX_SCORES float32, each [B, max_boxes, top_k].

    ``real_only`` classifies only the rows below the count (data-dependent shapes: for ONNX Runtime); else every
    row, the padding's results zeroed (fixed shapes: for TensorRT)."""
    model = onnx.ModelProto.FromString(served.SerializeToString())
    graph = model.graph
    cast = _check(model)
    (probabilities,) = graph.output
    if real_only:  # the prefix's Cast reads the gathered real crops
        head, tail = _real_only(probabilities.name)
        cast.input[0] = PREFIX + "real_crops"
    else:  # the prefix's Cast reads the [B, K, S, S, 3] crops; its float output is flattened before the transpose
        head, tail = _padded(cast.output[0], probabilities.name)
        cast.input[0], cast.output[0] = contract.CROPS, PREFIX + "float"
    tail[-2].output[0], tail[-1].output[0] = contract.BOX_CLASSES, contract.BOX_SCORES
    position = list(graph.node).index(cast) + (0 if real_only else 1)
    for offset, node in enumerate(head):
        graph.node.insert(position + offset, node)
    graph.node.extend(tail)
    used = {name for node in [*head, *tail] for name in node.input}
    graph.initializer.extend(c for c in _constants(max_boxes, size, top_k) if c.name in used)
    _replace_io(graph, probabilities, max_boxes, size, top_k)
    onnx.checker.check_model(model)
    return model


def _replace_io(graph: onnx.GraphProto, probabilities: onnx.ValueInfoProto, max_boxes: int, size: int,
                top_k: int) -> None:
    served_input = next(v for v in graph.input if v.name == SERVED_INPUT)
    graph.input.remove(served_input)
    graph.input.insert(0, _value_info(contract.CROPS, TensorProto.UINT8, ["batch", max_boxes, size, size, 3]))
    graph.input.insert(1, _value_info(contract.CROP_COUNT, TensorProto.INT32, ["batch", 1]))
    graph.output.remove(probabilities)
    graph.output.extend([_value_info(contract.BOX_CLASSES, TensorProto.INT32, ["batch", max_boxes, top_k]),
                         _value_info(contract.BOX_SCORES, TensorProto.FLOAT, ["batch", max_boxes, top_k])])
