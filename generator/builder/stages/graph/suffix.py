"""Fuse the per-anchor best class into the served graph (``v8`` heads).

A v8 head [N, 4 + nc, A] carries every class score of every anchor, yet NMS only needs the best one.
Reduced inside the detector, the tensor the NMS step receives shrinks to [N, 6, A] (cx, cy, w, h,
best score, best class): 14x fewer bytes for 80 classes, and the pass over all anchors x classes runs
in the runtime instead of in Python. The result is the ``v8_reduced`` layout of generator.serving.nms.

The best score is gathered at the arg-max rather than taken with a ReduceMax: one pass over the scores
fewer, and the value is exactly the one the v8 decode picks. ONNX Runtime's ArgMax and ReduceMax skip a
NaN unless it comes first, while numpy (the v8 decode) drops an anchor with any NaN class score, so a
ReduceSum over the scores -- NaN whenever one of them is -- turns the best score to NaN for such anchors.
The sum is also NaN for +inf next to -inf, an anchor the v8 decode drops too (its score is +inf); only
scores near the float limit with both signs, whose partial sums overflow both ways, could be dropped
here and kept there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from generator.errors import GeneratorError

REDUCED_OUTPUT = "boxes_score_class"
REDUCED_ROWS = 6  # cx, cy, w, h, best score, best class
# GatherElements (11) and Slice taking its bounds as inputs (10); Ultralytics exports use 11 or later.
MIN_OPSET = 11
FLOAT_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


class GraphSuffixError(GeneratorError):
    """The class reduction cannot be appended to this graph."""


def _opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _class_rows(head: onnx.ValueInfoProto) -> int | None:
    dims = head.type.tensor_type.shape.dim
    if len(dims) != 3:
        raise GraphSuffixError(f"output '{head.name}' has rank {len(dims)}; a v8 head is [N, 4 + nc, anchors]")
    rows = dims[1].dim_value if dims[1].HasField("dim_value") else None
    if rows is not None and rows <= 4:
        raise GraphSuffixError(f"output '{head.name}' has {rows} rows; a v8 head has 4 box rows plus class rows")
    return rows - 4 if rows is not None else None


def add_class_reduction(model: onnx.ModelProto, output_name: str = REDUCED_OUTPUT) -> onnx.ModelProto:
    """Return a copy whose only output is ``output_name`` [N, 6, A] in the v8 head's float type.

    The input graph's single output must be a v8 head [N, 4 + nc, A]. Ties between classes pick the
    first one, like numpy's argmax; the class id is cast to the head's float type (no INT64 output,
    which TensorRT would have to narrow).
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    opset = _opset(model)
    if opset < MIN_OPSET:
        raise GraphSuffixError(
            f"the class reduction needs ONNX opset >= {MIN_OPSET}, the model has {opset}; re-export with a "
            "newer opset or build with --no-reduce-head"
        )
    if len(graph.output) != 1:
        raise GraphSuffixError(f"expected one head output, found {len(graph.output)}")
    (head,) = graph.output
    elem_type = head.type.tensor_type.elem_type
    if elem_type not in FLOAT_TYPES:
        raise GraphSuffixError(f"output '{head.name}' must be float32 or float16 for the class reduction")
    num_classes = _class_rows(head)
    if elem_type == TensorProto.FLOAT16 and num_classes is not None and num_classes > 2048:
        raise GraphSuffixError(f"a float16 head cannot carry class ids above 2048 exactly ('{head.name}'); "
                               "build with --no-reduce-head")
    taken = {name for node in graph.node for name in node.output}
    if output_name in taken | {i.name for i in graph.input} | {i.name for i in graph.initializer}:
        raise GraphSuffixError(f"the graph already has a tensor named '{output_name}'")

    prefix = "reduce_classes_"
    # A known class count keeps the Slice end exact for shape inference; otherwise "to the end".
    end = 4 + num_classes if num_classes is not None else np.iinfo(np.int64).max
    graph.initializer.extend([
        numpy_helper.from_array(np.array([0], dtype=np.int64), prefix + "zero"),
        numpy_helper.from_array(np.array([4], dtype=np.int64), prefix + "four"),
        numpy_helper.from_array(np.array([end], dtype=np.int64), prefix + "end"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), prefix + "axis"),
        numpy_helper.from_array(np.array(np.nan, dtype=FLOAT_TYPES[elem_type]), prefix + "nan"),
    ])
    argmax_attrs: dict[str, Any] = {"axis": 1, "keepdims": 1}
    if opset >= 12:  # select_last_index exists from opset 12; before it, the first index is the only kind
        argmax_attrs["select_last_index"] = 0
    # ReduceSum takes its axes as an input from opset 13 on, as an attribute before.
    sum_inputs: list[str] = [prefix + "scores"]
    sum_attrs: dict[str, Any] = {"axes": [1]}
    if opset >= 13:
        sum_inputs, sum_attrs = [prefix + "scores", prefix + "axis"], {}
    nodes = [
        helper.make_node("Slice", [head.name, prefix + "zero", prefix + "four", prefix + "axis"],
                         [prefix + "boxes"], name=prefix + "boxes"),
        helper.make_node("Slice", [head.name, prefix + "four", prefix + "end", prefix + "axis"],
                         [prefix + "scores"], name=prefix + "scores"),
        helper.make_node("ArgMax", [prefix + "scores"], [prefix + "class_index"], name=prefix + "argmax",
                         **argmax_attrs),
        helper.make_node("GatherElements", [prefix + "scores", prefix + "class_index"], [prefix + "best"],
                         axis=1, name=prefix + "gather"),
        helper.make_node("ReduceSum", sum_inputs, [prefix + "sum"], keepdims=1, name=prefix + "sum", **sum_attrs),
        helper.make_node("IsNaN", [prefix + "sum"], [prefix + "any_nan"], name=prefix + "isnan"),
        helper.make_node("Where", [prefix + "any_nan", prefix + "nan", prefix + "best"], [prefix + "score"],
                         name=prefix + "where"),
        helper.make_node("Cast", [prefix + "class_index"], [prefix + "class"], to=elem_type, name=prefix + "cast"),
        helper.make_node("Concat", [prefix + "boxes", prefix + "score", prefix + "class"], [output_name], axis=1,
                         name=prefix + "concat"),
    ]
    dims = head.type.tensor_type.shape.dim
    reduced = helper.make_tensor_value_info(output_name, elem_type, None)
    out_dims = [onnx.TensorShapeProto.Dimension() for _ in range(3)]
    out_dims[0].CopyFrom(dims[0])
    out_dims[1].dim_value = REDUCED_ROWS
    out_dims[2].CopyFrom(dims[2])
    reduced.type.tensor_type.shape.dim.extend(out_dims)
    graph.node.extend(nodes)
    graph.output.remove(head)
    graph.output.append(reduced)
    onnx.checker.check_model(model)
    return model
