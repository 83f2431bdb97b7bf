"""Wrap a served classifier graph into a two-stage build's platform classifier step (ONNX Runtime, TensorRT).

The crop step sends every image's crops as one uint8 tensor [B, K, S, S, 3] (BGR, rows past the image's crop count
are zero) and the count [B, 1]. The wrapped graph flattens the crops to [B*K, S, S, 3] for the classifier's
normalisation prefix, takes each crop's top-k probabilities (ONNX TopK: equal values keep the lower class first, as
the embedded step's stable sort does), reshapes them back to [B, K, k] and zeroes the rows past the count, so the
served outputs equal the embedded step's, which classifies only the real crops.
"""

from __future__ import annotations

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


def wrap_crop_classifier(served: onnx.ModelProto, max_boxes: int, size: int, top_k: int) -> onnx.ModelProto:
    """Return a copy of ``served`` (a classifier with its normalisation prefix: uint8 [N, S, S, 3] in, [N, nc]
    probabilities out) taking contract.CROPS [B, max_boxes, size, size, 3] uint8 and contract.CROP_COUNT [B, 1]
    int32, returning contract.BOX_CLASSES int32 and contract.BOX_SCORES float32, each [B, max_boxes, top_k]."""
    model = onnx.ModelProto.FromString(served.SerializeToString())
    graph = model.graph
    cast = _check(model)
    (probabilities,) = graph.output
    initializers = [
        numpy_helper.from_array(np.array([-1, size, size, 3], dtype=np.int64), PREFIX + "flat_shape"),
        numpy_helper.from_array(np.array([-1, max_boxes, top_k], dtype=np.int64), PREFIX + "box_shape"),
        numpy_helper.from_array(np.array([-1, 1, 1], dtype=np.int64), PREFIX + "count_shape"),
        numpy_helper.from_array(np.array([top_k], dtype=np.int64), PREFIX + "k"),
        numpy_helper.from_array(np.arange(max_boxes, dtype=np.int32).reshape(1, max_boxes, 1), PREFIX + "rows"),
        numpy_helper.from_array(np.array(0, dtype=np.int32), PREFIX + "zero_class"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), PREFIX + "zero_score"),
    ]
    graph.initializer.extend(initializers)
    # The prefix's Cast now reads the [B, K, S, S, 3] crops; its float output is flattened before the transpose.
    cast_output = cast.output[0]
    cast.input[0] = contract.CROPS
    cast.output[0] = PREFIX + "float"
    head = [helper.make_node("Reshape", [PREFIX + "float", PREFIX + "flat_shape"], [cast_output],
                             name=PREFIX + "flatten")]
    tail = [
        helper.make_node("Cast", [probabilities.name], [PREFIX + "probabilities"], to=TensorProto.FLOAT,
                         name=PREFIX + "to_float"),
        helper.make_node("TopK", [PREFIX + "probabilities", PREFIX + "k"], [PREFIX + "top", PREFIX + "index"],
                         axis=-1, largest=1, sorted=1, name=PREFIX + "topk"),
        helper.make_node("Cast", [PREFIX + "index"], [PREFIX + "class"], to=TensorProto.INT32,
                         name=PREFIX + "class_int32"),
        helper.make_node("Reshape", [PREFIX + "class", PREFIX + "box_shape"], [PREFIX + "box_class"],
                         name=PREFIX + "class_rows"),
        helper.make_node("Reshape", [PREFIX + "top", PREFIX + "box_shape"], [PREFIX + "box_score"],
                         name=PREFIX + "score_rows"),
        helper.make_node("Reshape", [contract.CROP_COUNT, PREFIX + "count_shape"], [PREFIX + "count"],
                         name=PREFIX + "count_rows"),
        helper.make_node("Less", [PREFIX + "rows", PREFIX + "count"], [PREFIX + "real"], name=PREFIX + "real"),
        helper.make_node("Where", [PREFIX + "real", PREFIX + "box_class", PREFIX + "zero_class"],
                         [contract.BOX_CLASSES], name=PREFIX + "blank_classes"),
        helper.make_node("Where", [PREFIX + "real", PREFIX + "box_score", PREFIX + "zero_score"],
                         [contract.BOX_SCORES], name=PREFIX + "blank_scores"),
    ]
    position = list(graph.node).index(cast) + 1
    for offset, node in enumerate(head):
        graph.node.insert(position + offset, node)
    graph.node.extend(tail)
    served_input = next(v for v in graph.input if v.name == SERVED_INPUT)
    graph.input.remove(served_input)
    graph.input.insert(0, _value_info(contract.CROPS, TensorProto.UINT8, ["batch", max_boxes, size, size, 3]))
    graph.input.insert(1, _value_info(contract.CROP_COUNT, TensorProto.INT32, ["batch", 1]))
    graph.output.remove(probabilities)
    graph.output.extend([_value_info(contract.BOX_CLASSES, TensorProto.INT32, ["batch", max_boxes, top_k]),
                         _value_info(contract.BOX_SCORES, TensorProto.FLOAT, ["batch", max_boxes, top_k])])
    onnx.checker.check_model(model)
    return model
