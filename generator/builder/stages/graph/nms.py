"""Class-aware NMS at the end of the served detector graph (``--nms-in-graph``).

The served graph ends with ONNX ``NonMaxSuppression``, which TensorRT runs on the GPU (``INMSLayer``) and ONNX
Runtime on the CPU, so every target and the reference pipeline run one graph. Its output is padded, never
data-dependent (what Triton's batch splitting and the TensorRT load rules need): ``[N, max_det, 6]`` rows of
x1, y1, x2, y2 (input pixels), score, class id, sorted by score, the rows past each image's count all zero.
That is the ``graph_nms`` layout of ``generator.serving.nms``: the Python step only maps the boxes back.

The selection is the Python step's (``generator.serving.nms.postprocess``): one candidate per anchor, its best
class; scores must exceed the confidence threshold and be finite, boxes finite, class ids not NaN or negative;
a box suppresses only boxes of its own image and class whose IoU exceeds the threshold; each image keeps its
``max_det`` best. NMS gets one score row per class holding only the anchors whose best class it is, so the IoU
is computed on the boxes themselves (no class offset that float32 would round). Where they may differ: the
Python step first keeps each image's 4096 best candidates and TensorRT its 5000 best, which changes the result
only when fewer than ``max_det`` boxes survive among those; boxes with exactly equal scores may be ordered
differently; the Python step clips absurd coordinates (beyond 1e5) before the IoU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from generator.builder.spec.options import NMS_IN_GRAPH_MAX_DETECTIONS
from generator.builder.stages.graph.suffix import FLOAT_TYPES, add_class_reduction
from generator.errors import GeneratorError

NMS_OUTPUT = "detections"
NMS_ROWS = 6  # x1, y1, x2, y2, score, class
# Axes and split sizes as inputs (Unsqueeze, ReduceSum, Split) from 13; NonMaxSuppression, TopK with a K input,
# ScatterND and GatherND with batch_dims are older.
MIN_OPSET = 13
_P = "graph_nms_"


class GraphNmsError(GeneratorError):
    """NMS cannot be appended to this graph."""


@dataclass(frozen=True)
class NmsSettings:
    conf_threshold: float
    iou_threshold: float
    max_detections: int
    num_classes: int


def _opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _node(op: str, inputs: list[str], output: str, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def _constants(settings: NmsSettings, anchors: int | None) -> list[onnx.TensorProto]:
    arrays: dict[str, np.ndarray] = {
        "zero": np.array(0.0, dtype=np.float32),
        "two": np.array(2.0, dtype=np.float32),
        "conf": np.array([settings.conf_threshold], dtype=np.float32),
        "iou": np.array([settings.iou_threshold], dtype=np.float32),
        "max_det": np.array([settings.max_detections], dtype=np.int64),
        "classes": np.arange(settings.num_classes, dtype=np.float32),
        "box_lo": np.array([0], dtype=np.int64), "box_hi": np.array([4], dtype=np.int64),
        "xy_hi": np.array([2], dtype=np.int64), "last": np.array([-1], dtype=np.int64),
        "score_at": np.array(4, dtype=np.int64), "class_at": np.array(5, dtype=np.int64),
        "pairs": np.array([0, 2], dtype=np.int64),
    }
    if anchors is None:
        arrays["anchor_axis"] = np.array([1], dtype=np.int64)
    return [numpy_helper.from_array(value, _P + name) for name, value in arrays.items()]


def _finite(name: str, out: str) -> list[onnx.NodeProto]:
    return [_node("IsNaN", [name], out + "_nan"), _node("IsInf", [name], out + "_inf"),
            _node("Or", [out + "_nan", out + "_inf"], out + "_bad"), _node("Not", [out + "_bad"], out)]


def _candidate_nodes(rows: str) -> list[onnx.NodeProto]:
    """[N, A, 6] cx, cy, w, h, score, class (float32) -> xyxy boxes, masked scores and one row per anchor."""
    p = _P
    nodes = [
        _node("Slice", [rows, p + "box_lo", p + "xy_hi", p + "last"], p + "xy"),
        _node("Slice", [rows, p + "xy_hi", p + "box_hi", p + "last"], p + "wh"),
        _node("Div", [p + "wh", p + "two"], p + "half"),  # as the Python step: xy -/+ wh / 2
        _node("Sub", [p + "xy", p + "half"], p + "x1y1"),
        _node("Add", [p + "xy", p + "half"], p + "x2y2"),
        _node("Concat", [p + "x1y1", p + "x2y2"], p + "boxes", axis=-1),
        _node("Gather", [rows, p + "score_at"], p + "score", axis=2),
        _node("Gather", [rows, p + "class_at"], p + "class", axis=2),
        *_finite(p + "score", p + "score_ok"),
        # x * 0 is NaN exactly where x is not finite; a sum of those is NaN when any coordinate is.
        _node("Mul", [p + "boxes", p + "zero"], p + "box_zeros"),
        _node("ReduceSum", [p + "box_zeros", p + "last"], p + "box_sum", keepdims=0),
        _node("IsNaN", [p + "box_sum"], p + "box_bad"),
        _node("Not", [p + "box_bad"], p + "box_ok"),
        _node("IsNaN", [p + "class"], p + "class_nan"),
        _node("Not", [p + "class_nan"], p + "class_real"),
        _node("Less", [p + "class", p + "zero"], p + "class_negative"),
        _node("Not", [p + "class_negative"], p + "class_not_negative"),
        _node("And", [p + "score_ok", p + "box_ok"], p + "ok1"),
        _node("And", [p + "class_real", p + "class_not_negative"], p + "ok2"),
        _node("And", [p + "ok1", p + "ok2"], p + "ok"),
        _node("Where", [p + "ok", p + "score", p + "zero"], p + "masked"),
        _node("Where", [p + "ok", p + "class", p + "zero"], p + "class_clean"),
        # One score row per class: an anchor scores only in its best class (the Python step's candidates).
        _node("Floor", [p + "class_clean"], p + "class_id"),  # astype(int64) of a non-negative id
        _node("Unsqueeze", [p + "class_id", p + "last"], p + "class_col"),
        _node("Equal", [p + "class_col", p + "classes"], p + "onehot"),  # [N, A, C]
        _node("Unsqueeze", [p + "masked", p + "last"], p + "masked_col"),
        _node("Where", [p + "onehot", p + "masked_col", p + "zero"], p + "per_class"),
        _node("Transpose", [p + "per_class"], p + "scores", perm=[0, 2, 1]),  # [N, C, A]
        _node("Concat", [p + "boxes", p + "masked_col", p + "class_col"], p + "rows_xyxy", axis=-1),
    ]
    return nodes


def _selection_nodes(settings: NmsSettings, anchors: int | None) -> list[onnx.NodeProto]:
    """NonMaxSuppression, then each image's best ``max_det`` kept rows, zero-padded."""
    p = _P
    nodes = [
        _node("NonMaxSuppression", [p + "boxes", p + "scores", p + "max_det", p + "iou", p + "conf"], p + "selected",
              center_point_box=0),
        _node("Gather", [p + "selected", p + "pairs"], p + "image_anchor", axis=1),  # [K, 2]: image, anchor
        _node("GatherND", [p + "masked", p + "image_anchor"], p + "kept_scores"),
        _node("Shape", [p + "masked"], p + "masked_shape"),
        _node("ConstantOfShape", [p + "masked_shape"], p + "nothing",
              value=numpy_helper.from_array(np.array([0.0], dtype=np.float32))),
        # Kept anchors carry their score (> conf >= 0), the others 0: TopK puts the kept first, best first.
        _node("ScatterND", [p + "nothing", p + "image_anchor", p + "kept_scores"], p + "kept"),
    ]
    keep = settings.max_detections if anchors is None else min(settings.max_detections, anchors)
    nodes.append(_node("Constant", [], p + "k", value=numpy_helper.from_array(np.array([keep], dtype=np.int64))))
    if anchors is None:  # a symbolic anchor count: K = min(anchors, max_det), then pad to max_det rows
        nodes += [_node("Gather", [p + "masked_shape", p + "anchor_axis"], p + "anchors"),
                  _node("Min", [p + "anchors", p + "max_det"], p + "k_used")]
    k_name = p + "k_used" if anchors is None else p + "k"
    nodes += [
        helper.make_node("TopK", [p + "kept", k_name], [p + "top_scores", p + "top"], axis=1, largest=1, sorted=1,
                         name=p + "topk"),
        _node("Unsqueeze", [p + "top", p + "last"], p + "top_col"),
        _node("GatherND", [p + "rows_xyxy", p + "top_col"], p + "top_rows", batch_dims=1),
        _node("Greater", [p + "top_scores", p + "zero"], p + "top_kept"),
        _node("Unsqueeze", [p + "top_kept", p + "last"], p + "top_kept_col"),
        # Where, not a product: a dropped anchor's row may hold inf or NaN.
        _node("Where", [p + "top_kept_col", p + "top_rows", p + "zero"], p + "padded"),
    ]
    return nodes


def _pad_nodes(settings: NmsSettings, anchors: int | None, output: str) -> list[onnx.NodeProto]:
    """Pad the anchor axis up to max_det rows when there may be fewer anchors than that."""
    p = _P
    if anchors is not None and anchors >= settings.max_detections:
        return [_node("Identity", [p + "padded"], output)]
    k_name = p + "k_used" if anchors is None else p + "k"
    return [
        _node("Sub", [p + "max_det", k_name], p + "missing"),
        _node("Constant", [], p + "pad_before", value=numpy_helper.from_array(np.zeros(4, dtype=np.int64))),
        _node("Constant", [], p + "pad_after", value=numpy_helper.from_array(np.zeros(1, dtype=np.int64))),
        # [0, 0, 0, 0, missing, 0]: nothing before any axis, ``missing`` rows after the detection axis.
        _node("Concat", [p + "pad_before", p + "missing", p + "pad_after"], p + "pads", axis=0),
        _node("Pad", [p + "padded", p + "pads"], output, mode="constant"),
    ]


def _rows_from_head(model: onnx.ModelProto, layout: str) -> tuple[onnx.ModelProto, list[onnx.NodeProto], str]:
    """The head as float32 [N, A, 6] rows of cx, cy, w, h, best score, best class."""
    if layout == "v8":
        model, layout = add_class_reduction(model), "v8_reduced"
    (head,) = model.graph.output
    if layout == "v8_reduced":
        nodes = [_node("Transpose", [head.name], _P + "rows_t", perm=[0, 2, 1])]
    elif layout == "v5":
        nodes = _v5_rows(head.name)
    else:
        raise GraphNmsError(f"--nms-in-graph needs a v8 or v5 head; this graph's layout is {layout}"
                            + (" (already NMS-free: drop --nms-in-graph)" if layout == "end2end" else ""))
    elem_type = head.type.tensor_type.elem_type
    if elem_type not in FLOAT_TYPES:
        raise GraphNmsError(f"output '{head.name}' must be float32 or float16 for --nms-in-graph")
    # The Python step decodes in float32 whatever the head's type: so does this.
    nodes.append(_node("Cast", [nodes[-1].output[0]], _P + "rows", to=TensorProto.FLOAT))
    return model, nodes, head.name


def _v5_rows(head: str) -> list[onnx.NodeProto]:
    """[N, A, 5 + nc] -> [N, A, 6]: the best of objectness x class score, NaN when any class score is."""
    p = _P + "v5_"
    return [
        helper.make_node("Split", [head, _P + "v5_split"], [p + "box", p + "obj", p + "cls"], axis=2, name=p + "split"),
        _node("Mul", [p + "cls", p + "obj"], p + "scores"),
        _node("ArgMax", [p + "scores"], p + "best_index", axis=2, keepdims=1, select_last_index=0),
        _node("GatherElements", [p + "scores", p + "best_index"], p + "best", axis=2),
        _node("ReduceSum", [p + "scores", _P + "last"], p + "sum", keepdims=1),
        _node("IsNaN", [p + "sum"], p + "any_nan"),
        _node("Where", [p + "any_nan", p + "sum", p + "best"], p + "score"),  # NaN where numpy's max is
        _node("Cast", [p + "best_index"], p + "class", to=TensorProto.FLOAT),
        _node("Cast", [p + "box"], p + "box_f", to=TensorProto.FLOAT),
        _node("Cast", [p + "score"], p + "score_f", to=TensorProto.FLOAT),
        _node("Concat", [p + "box_f", p + "score_f", p + "class"], p + "rows6", axis=2),
    ]


def _anchors(head: onnx.ValueInfoProto, layout: str) -> int | None:
    dims = head.type.tensor_type.shape.dim
    if len(dims) != 3:
        raise GraphNmsError(f"output '{head.name}' has rank {len(dims)}; a detection head has rank 3")
    dim = dims[2] if layout in ("v8", "v8_reduced") else dims[1]
    return dim.dim_value if dim.HasField("dim_value") else None


def add_nms(model: onnx.ModelProto, layout: str, settings: NmsSettings,
            served_anchors: int | None = None) -> onnx.ModelProto:
    """Return a copy whose only output is ``NMS_OUTPUT`` float32 [N, max_det, 6] (the ``graph_nms`` layout).

    ``layout`` is the head the graph ends with now: ``v8`` (the class reduction is added first),
    ``v8_reduced`` or ``v5``. ``served_anchors``: the anchor count at the served image size, for a graph whose
    head leaves it open (an export with dynamic spatial axes, always fed that one size): TopK's K becomes a
    constant, as TensorRT's parser requires.
    """
    opset = _opset(model)
    if opset < MIN_OPSET:
        raise GraphNmsError(f"--nms-in-graph needs ONNX opset >= {MIN_OPSET}, the model has {opset}; re-export with "
                            "a newer opset or serve without --nms-in-graph")
    if not 1 <= settings.max_detections <= NMS_IN_GRAPH_MAX_DETECTIONS:
        raise GraphNmsError(f"--nms-in-graph keeps 1..{NMS_IN_GRAPH_MAX_DETECTIONS} detections per image, "
                            f"not {settings.max_detections}")
    if settings.num_classes < 1:
        raise GraphNmsError("--nms-in-graph needs the class count (ONNX metadata 'names' or a static head)")
    if len(model.graph.output) != 1:
        raise GraphNmsError(f"expected one head output, found {len(model.graph.output)}")
    anchors = _anchors(model.graph.output[0], layout)
    if anchors is None:
        anchors = served_anchors
    model, head_nodes, head_name = _rows_from_head(onnx.ModelProto.FromString(model.SerializeToString()), layout)
    graph = model.graph
    if NMS_OUTPUT in {o for node in graph.node for o in node.output} | {i.name for i in graph.input}:
        raise GraphNmsError(f"the graph already has a tensor named '{NMS_OUTPUT}'")
    graph.initializer.extend(_constants(settings, anchors))
    if layout == "v5":
        split = np.array([4, 1, settings.num_classes], dtype=np.int64)
        graph.initializer.append(numpy_helper.from_array(split, _P + "v5_split"))
    graph.node.extend([*head_nodes, *_candidate_nodes(_P + "rows"), *_selection_nodes(settings, anchors),
                       *_pad_nodes(settings, anchors, NMS_OUTPUT)])
    head = next(o for o in graph.output if o.name == head_name)
    batch = onnx.TensorShapeProto.Dimension()
    batch.CopyFrom(head.type.tensor_type.shape.dim[0])
    out = helper.make_tensor_value_info(NMS_OUTPUT, TensorProto.FLOAT, None)
    out.type.tensor_type.shape.dim.add().CopyFrom(batch)
    out.type.tensor_type.shape.dim.add().dim_value = settings.max_detections
    out.type.tensor_type.shape.dim.add().dim_value = NMS_ROWS
    graph.output.remove(head)
    graph.output.append(out)
    onnx.checker.check_model(model)
    return model
