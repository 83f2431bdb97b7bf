"""What TensorRT's ONNX parser rejects, checked on the ONNX before anything is written.

A precision graph that TensorRT cannot parse fails only on the GPU host, long after the build here said
it was fine (issue 10: ONNX Runtime's ``quantize_static`` feeds INT32 Conv biases through
DequantizeLinear, which the parser refuses). The rules below are the parser's documented limits that a
precision conversion can break, each with the source it comes from:

- onnx-tensorrt ``docs/operators.md`` (10.1 GA; NVIDIA/TensorRT#4542 for the INT32 bias):
  DequantizeLinear takes INT8, FP8 or INT4 (FP4 from 10.8) and ``x_zero_point`` must be zero;
  QuantizeLinear takes FP32, FP16 or BF16 and ``y_zero_point`` must be 0; "UINT8 is only supported as
  network input or output tensor types"; the operators marked N (``UNSUPPORTED_OPS``); ``axes``/``K``
  inputs that must be initializers; the Resize modes it implements.
- TensorRT "Working with Quantized Types": symmetric quantization only; INT8 activations are quantized
  per tensor, weights per tensor or per output channel.
- TensorRT "ONNX Opset Guide" (11.x): opsets 9 to 25 (TensorRT 10.0 stopped at 20).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from generator.builder.stages.precision.errors import PrecisionError

MIN_OPSET, MAX_OPSET = 9, 25
QUANTIZED_TYPES = frozenset({TensorProto.INT8, TensorProto.FLOAT8E4M3FN, TensorProto.INT4,
                             TensorProto.FLOAT4E2M1})
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16})
# operators.md rows marked N. QLinear*/*Integer/DynamicQuantizeLinear are what ONNX Runtime's QOperator
# format and dynamic quantization emit instead of Q/DQ; the rest cannot appear in a detector export.
UNSUPPORTED_OPS = frozenset({
    "AffineGrid", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor",
    "BlackmanWindow", "CenterCropPad", "Col2Im", "Compress", "ConcatFromSequence", "ConvInteger", "DFT", "Det",
    "DynamicQuantizeLinear", "HammingWindow", "HannWindow", "ImageDecoder", "MatMulInteger", "MaxRoiPool",
    "MaxUnpool", "MelWeightMatrix", "Multinomial", "NegativeLogLikelihoodLoss", "Optional",
    "OptionalGetElement", "OptionalHasElement", "QLinearConv", "QLinearMatMul", "RegexFullMatch", "STFT",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
    "SequenceMap", "SoftmaxCrossEntropyLoss", "SplitToSequence", "StringConcat", "StringNormalizer",
    "StringSplit", "TfIdfVectorizer", "Unique",
})
# (op, input index): inputs operators.md requires to be initializers. Reduce* take axes as an input
# from opset 18 (ReduceSum from 13); before that they are attributes and nothing needs checking.
CONSTANT_INPUTS = {
    "ReduceMax": 1, "ReduceMin": 1, "ReduceMean": 1, "ReduceSum": 1, "ReduceProd": 1, "ReduceL1": 1,
    "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1, "ReduceSumSquare": 1,
    "Slice": 3, "Squeeze": 1, "Unsqueeze": 1, "CumSum": 1, "TopK": 1,
}
MAX_TOPK = 3840
_RESIZE_MODES = {"nearest", "linear"}
_RESIZE_COORDINATES = {"half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners"}


@dataclass(frozen=True)
class Incompatibility:
    """One node TensorRT's parser would refuse, what is wrong and how to fix it."""

    node: str
    op_type: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"node '{self.node}' ({self.op_type}): {self.problem}; {self.fix}"


Report = Callable[[str, str], Incompatibility]  # (problem, fix) -> an Incompatibility of the current node


class TensorRTCompatibilityError(PrecisionError):
    """The graph holds something TensorRT's ONNX parser rejects."""


def check_tensorrt_compatible(model: onnx.ModelProto, what: str = "graph") -> None:
    """Raise :class:`TensorRTCompatibilityError` naming the first offending node (and how many more)."""
    found = find_incompatibilities(model)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise TensorRTCompatibilityError(f"TensorRT's ONNX parser would reject the {what}: {found[0]}{more}")


def find_incompatibilities(model: onnx.ModelProto) -> list[Incompatibility]:
    """Every parser rule above that ``model`` breaks, in graph order."""
    graph = _Graph(model)
    problems = list(_check_opset(model))
    for node in model.graph.node:
        problems.extend(_check_node(node, graph))
    return problems


class _Graph:
    """Types and constant values of the graph's tensors (after ONNX shape inference)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        inferred = onnx.shape_inference.infer_shapes(model)
        graph = inferred.graph
        self.types: dict[str, int] = {}
        self.ranks: dict[str, list[int | None]] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            tensor = info.type.tensor_type
            self.types[info.name] = tensor.elem_type
            if tensor.HasField("shape"):
                self.ranks[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        self.constants: dict[str, TensorProto] = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.constants[node.output[0]] = node.attribute[0].t
        for name, tensor in self.constants.items():
            self.types[name] = tensor.data_type
            self.ranks[name] = list(tensor.dims)
        self.io = {v.name for v in [*graph.input, *graph.output]}
        # Model Optimizer's form of a quantized weight: a float initializer -> QuantizeLinear -> DQ.
        self.weights = set(self.constants) | {
            node.output[0] for node in graph.node if node.op_type == "QuantizeLinear" and node.input[0] in self.constants
        }

    def value(self, name: str) -> np.ndarray | None:
        tensor = self.constants.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor)


def _check_opset(model: onnx.ModelProto) -> Iterator[Incompatibility]:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not MIN_OPSET <= entry.version <= MAX_OPSET:
            yield Incompatibility("<model>", "opset", f"ONNX opset {entry.version} is outside the {MIN_OPSET}-"
                                  f"{MAX_OPSET} TensorRT parses", "re-export the model with opset 17-19")


def _check_node(node: onnx.NodeProto, graph: _Graph) -> Iterator[Incompatibility]:
    def bad(problem: str, fix: str) -> Incompatibility:
        return Incompatibility(node.name or node.output[0], node.op_type, problem, fix)

    if node.domain not in ("", "ai.onnx"):
        yield bad(f"custom domain '{node.domain}' needs a TensorRT plugin",
                  "export with standard ONNX operators only (no contrib/QDQ-contrib ops)")
    elif node.op_type in UNSUPPORTED_OPS:
        yield bad("operator not supported by the ONNX parser",
                  "use Q/DQ (QuantizeLinear/DequantizeLinear) quantization, not QOperator or dynamic quantization"
                  if "Integer" in node.op_type or node.op_type.startswith(("QLinear", "Dynamic"))
                  else "replace it in the export (see onnx-tensorrt docs/operators.md)")
    for output in node.output:
        if output and graph.types.get(output) == TensorProto.UINT8 and output not in graph.io:
            yield bad(f"tensor '{output}' is UINT8 inside the network",
                      "UINT8 is allowed only as a network input or output: quantize to INT8 (QInt8)")
    if node.op_type == "DequantizeLinear":
        yield from _check_qdq(node, graph, bad, quantized=node.input[0])
    elif node.op_type == "QuantizeLinear":
        yield from _check_qdq(node, graph, bad, quantized=node.output[0])
    yield from _check_constant_inputs(node, graph, bad)
    if node.op_type == "Resize":
        yield from _check_resize(node, bad)


def _check_qdq(node: onnx.NodeProto, graph: _Graph, bad: Report, quantized: str) -> Iterator[Incompatibility]:
    """Quantized side INT8/FP8/INT4, float scales > 0, zero points 0, per-channel only on weights."""
    is_dq = node.op_type == "DequantizeLinear"
    qtype = graph.types.get(quantized)
    if qtype is not None and qtype not in QUANTIZED_TYPES:
        name = TensorProto.DataType.Name(qtype)
        yield bad(f"{'input' if is_dq else 'output'} '{quantized}' is {name}; TensorRT takes INT8, FP8 or INT4 "
                  f"{'into DequantizeLinear' if is_dq else 'out of QuantizeLinear'}",
                  "quantize without INT32 biases (ONNX Runtime: extra_options QuantizeBias=False) and with "
                  "signed INT8 types" if qtype == TensorProto.INT32 else "use signed INT8 (QInt8) types")
    if not is_dq and graph.types.get(node.input[0]) not in FLOAT_TYPES | {None}:
        yield bad("QuantizeLinear input is not FP32/FP16/BF16", "quantize a float tensor")
    scale_name = node.input[1]
    if graph.types.get(scale_name) not in FLOAT_TYPES:
        yield bad(f"scale '{scale_name}' is not a float tensor", "use FP32 or FP16 scales")
    scale = graph.value(scale_name)
    if scale is None:
        yield bad(f"scale '{scale_name}' is computed at run time", "use constant (initializer) scales")
    elif not np.all(np.isfinite(scale) & (scale > 0)):
        yield bad(f"scale '{scale_name}' has values that are not finite and positive", "recalibrate")
    if len(node.input) > 2 and node.input[2]:
        zero = graph.value(node.input[2])
        if zero is None or np.any(zero.astype(np.float64) != 0):
            yield bad(f"zero point '{node.input[2]}' is not all zeros (asymmetric quantization)",
                      "quantize symmetrically (ActivationSymmetric=True, WeightSymmetric=True)")
    if scale is not None and scale.size > 1:
        yield from _check_axis(node, graph, bad, scale)


def _check_axis(node: onnx.NodeProto, graph: _Graph, bad: Report, scale: np.ndarray) -> Iterator[Incompatibility]:
    data = node.input[0]
    if data not in graph.weights:
        yield bad(f"per-channel scale on activation '{data}'", "quantize activations per tensor")
        return
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    dims = graph.ranks.get(data)
    if scale.ndim != 1:
        yield bad(f"scale has shape {list(scale.shape)}", "use a scalar or a 1-D per-channel scale")
    elif dims is not None:
        if not -len(dims) <= axis < len(dims):
            yield bad(f"axis {axis} is outside a rank-{len(dims)} tensor", "quantize along the output channels")
        elif dims[axis] not in (None, scale.size):
            yield bad(f"{scale.size} scales for {dims[axis]} channels on axis {axis}",
                      "give one scale per channel of the quantized axis")


def _check_constant_inputs(node: onnx.NodeProto, graph: _Graph, bad: Report) -> Iterator[Incompatibility]:
    index = CONSTANT_INPUTS.get(node.op_type)
    if index is None or len(node.input) <= index or not node.input[index]:
        return
    name = node.input[index]
    value = graph.value(name)
    what = "K" if node.op_type == "TopK" else "axes"
    if value is None:
        yield bad(f"'{what}' input '{name}' is computed at run time", f"make '{what}' an initializer "
                  "(constant-fold the graph, e.g. onnxsim or polygraphy surgeon sanitize --fold-constants)")
    elif node.op_type == "TopK" and np.any(value >= MAX_TOPK):
        yield bad(f"K = {int(np.max(value))}", f"TensorRT's TopK takes K below {MAX_TOPK}")


def _check_resize(node: onnx.NodeProto, bad: Report) -> Iterator[Incompatibility]:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    decode = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    if decode.get("mode", "nearest") not in _RESIZE_MODES:
        yield bad(f"mode '{decode['mode']}'", "use nearest or linear resizing")
    coordinates = decode.get("coordinate_transformation_mode", "half_pixel")
    if coordinates not in _RESIZE_COORDINATES:
        yield bad(f"coordinate_transformation_mode '{coordinates}'", "use half_pixel or asymmetric")
    if decode.get("antialias", 0):
        yield bad("antialias=1", "resize without antialiasing")
    if decode.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        yield bad(f"keep_aspect_ratio_policy '{decode['keep_aspect_ratio_policy']}'", "use stretch")


def quantization_summary(model: onnx.ModelProto) -> str:
    """Q/DQ counts and the types entering DequantizeLinear, for the manifest and build logs."""
    graph = _Graph(model)
    counts = {op: sum(1 for n in model.graph.node if n.op_type == op) for op in ("QuantizeLinear", "DequantizeLinear")}
    types: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            name = TensorProto.DataType.Name(graph.types.get(node.input[0], TensorProto.UNDEFINED))
            types[name] = types.get(name, 0) + 1
    inputs = ", ".join(f"{name} {count}" for name, count in sorted(types.items())) or "none"
    return f"{counts['QuantizeLinear']} QuantizeLinear, {counts['DequantizeLinear']} DequantizeLinear (inputs: {inputs})"
