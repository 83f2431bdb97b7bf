"""FP16 graph conversion that keeps the detection head's tail and fragile ops in FP32.

onnxconverter-common's converter crashes (``remove_unnecessary_cast_node``) or rounds the output
through FP16 when a blocked node writes a graph output, which is exactly where the score Sigmoid
and box decode sit. So the graph is split: the body (all but the head tail) is converted with
FP32 I/O, and the untouched FP32 tail is joined back onto it. Where the converter still leaves a node
inconsistent (FP16 weights next to FP32 data), that node is kept in FP32 and reported instead of failing
the build; the precision stage writes the report into the manifest.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import onnx

from generator.builder.stages.precision.errors import PrecisionError
from generator.builder.stages.precision.head import ensure_node_names, find_detection_head

# Resize: FP16 scales/roi and the converter's Cast insertion around its optional inputs have broken
# both ONNX Runtime and TensorRT parses; upsampling costs nothing in FP32.
DEFAULT_KEEP_FP32_OPS: tuple[str, ...] = ("Resize", "Upsample", "Range", "TopK", "NonMaxSuppression")

_FP16_MARKER_KEY = "triton_detection_ensemble.precision"
# Nodes kept in FP32 after the conversion left them inconsistent, at most (each one costs a conversion).
MAX_FP32_FALLBACK = 16
# ONNX's shape inference names the node it stopped at: "(op_type:Conv, node name: /model.17/conv/Conv): ...".
_NODE_IN_ERROR = re.compile(r"node name: ([^)]+)\)")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fp32Fallback:
    """A node the conversion kept in FP32 because converting it left the graph inconsistent, and why."""

    node: str
    reason: str


@dataclass(frozen=True)
class Fp16Conversion:
    """The converted graph and the nodes it had to keep in FP32 beyond the ones asked for."""

    model: onnx.ModelProto
    fallback: tuple[Fp32Fallback, ...] = ()


def convert_fp16(
    model: onnx.ModelProto,
    keep_fp32_ops: Iterable[str] = DEFAULT_KEEP_FP32_OPS,
    keep_fp32_nodes: Iterable[str] = (),
    keep_head_fp32: bool = True,
) -> onnx.ModelProto:
    """Return an FP16 copy of ``model`` with FP32 inputs and outputs (see :func:`convert_fp16_report`)."""
    return convert_fp16_report(model, keep_fp32_ops, keep_fp32_nodes, keep_head_fp32).model


def convert_fp16_report(
    model: onnx.ModelProto,
    keep_fp32_ops: Iterable[str] = DEFAULT_KEEP_FP32_OPS,
    keep_fp32_nodes: Iterable[str] = (),
    keep_head_fp32: bool = True,
) -> Fp16Conversion:
    """Convert ``model`` to FP16 with FP32 inputs and outputs, and say which nodes had to stay FP32.

    ``keep_fp32_ops`` are op types and ``keep_fp32_nodes`` node names left in FP32 inside the body;
    with ``keep_head_fp32`` the whole head tail (see :mod:`generator.builder.stages.precision.head`) stays FP32.
    When the converted graph fails ONNX's checks at a node (the converter leaves an FP32 tensor next to FP16
    weights there), that node is kept in FP32 too and the conversion runs again, up to
    ``MAX_FP32_FALLBACK`` nodes. The result passes ``onnx.checker`` and keeps the original metadata.
    """
    named = ensure_node_names(model)
    inferred = onnx.shape_inference.infer_shapes(named)
    node_names = {node.name for node in inferred.graph.node}
    extra_nodes = list(keep_fp32_nodes)
    unknown = sorted(set(extra_nodes) - node_names)
    if unknown:
        raise PrecisionError(
            f"cannot keep unknown node(s) in FP32: {', '.join(unknown)}; check the names in the ONNX"
        )

    tail = set(find_detection_head(inferred).tail) if keep_head_fp32 else set()
    body, tail_graph = _split(inferred, tail)
    from onnxconverter_common import float16

    op_block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(keep_fp32_ops))
    asked = [n for n in extra_nodes if n not in tail]
    body_nodes = {n.name for n in body.graph.node}
    fallback: list[Fp32Fallback] = []
    while True:
        blocked = [*asked, *(f.node for f in fallback)]
        joined = _join(inferred, _convert_body(body, op_block, blocked), tail_graph)
        problem = _first_invalid_node(joined)
        if problem is None:
            break
        node, reason = problem
        if node is None or node in blocked or node not in body_nodes or len(fallback) >= MAX_FP32_FALLBACK:
            raise PrecisionError(f"FP16 conversion produced an invalid graph: {reason}")
        logger.warning("FP16: keeping node %s in FP32, converting it leaves the graph inconsistent: %s",
                       node, reason)
        fallback.append(Fp32Fallback(node, reason))
    return Fp16Conversion(joined, tuple(fallback))


def _convert_body(body: onnx.ModelProto, op_block: list[str], node_block: list[str]) -> onnx.ModelProto:
    """The converter on the body, after giving the nodes it keeps in FP32 their own copy of shared weights."""
    from onnxconverter_common import float16

    body = _guard_kept_outputs(_unshare_kept_initializers(body, set(op_block), set(node_block)), set(op_block),
                               set(node_block))
    with warnings.catch_warnings():
        # Weights below FP16's range are clamped to 1e-7 and the converter warns once per value.
        warnings.simplefilter("ignore", UserWarning)
        try:
            return float16.convert_float_to_float16(body, keep_io_types=True, op_block_list=op_block,
                                                    node_block_list=node_block)
        except ValueError as exc:
            raise PrecisionError(f"FP16 conversion failed: {exc}") from exc


def _unshare_kept_initializers(body: onnx.ModelProto, op_block: set[str], node_block: set[str]
                               ) -> onnx.ModelProto:
    """Give nodes kept in FP32 their own copy of each initializer that converted nodes read too.

    The converter turns a shared initializer into FP16 for the converted readers and leaves the kept node
    reading it as it is, an FP16 weight next to FP32 data ("W has inconsistent type"). Exporters share
    initializers whenever values repeat (onnxslim merges equal constants: every zero bias of one size).
    """
    def kept(node: onnx.NodeProto) -> bool:
        return node.op_type in op_block or node.name in node_block

    floats = {i.name: i for i in body.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    converted_reads = {name for n in body.graph.node if not kept(n) for name in n.input if name in floats}
    shared = {name for n in body.graph.node if kept(n) for name in n.input if name in converted_reads}
    if not shared:
        return body
    copy = onnx.ModelProto()
    copy.CopyFrom(body)
    for name in sorted(shared):
        tensor = onnx.TensorProto()
        tensor.CopyFrom(floats[name])
        tensor.name = f"{name}__kept_fp32"
        copy.graph.initializer.append(tensor)
    for node in copy.graph.node:
        if kept(node):
            for index, name in enumerate(node.input):
                if name in shared:
                    node.input[index] = f"{name}__kept_fp32"
    return copy


def _guard_kept_outputs(body: onnx.ModelProto, op_block: set[str], node_block: set[str]) -> onnx.ModelProto:
    """Put an Identity between a node kept in FP32 and a body output it writes.

    The converter leaves such an output FP16 while the node writes FP32 (the tail then reads FP16 data next to
    its FP32 weights); behind a converted Identity it casts the output back to FP32 like every other.
    """
    outputs = {o.name for o in body.graph.output}
    kept = [n for n in body.graph.node if (n.op_type in op_block or n.name in node_block)
            and any(o in outputs for o in n.output)]
    if not kept:
        return body
    copy = onnx.ModelProto()
    copy.CopyFrom(body)
    renamed: dict[str, str] = {}
    for node in copy.graph.node:
        if node.name in {k.name for k in kept}:
            for index, name in enumerate(node.output):
                if name in outputs:
                    renamed[name] = node.output[index] = f"{name}__kept_fp32"
    for node in copy.graph.node:
        for index, name in enumerate(node.input):
            node.input[index] = renamed.get(name, name)
    copy.graph.node.extend(onnx.helper.make_node("Identity", [inner], [name], name=f"{inner}_identity")
                           for name, inner in renamed.items())
    return copy


def _first_invalid_node(model: onnx.ModelProto) -> tuple[str | None, str] | None:
    """None when ``model`` passes ONNX's full check; else the node the error names (if any) and the error."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        message = str(exc)
        match = _NODE_IN_ERROR.search(message)
        return (match.group(1) if match else None), message.strip()
    return None


def fp32_node_names(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes that compute in FP32 in a converted graph (for reports and tests)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = _tensor_types(inferred.graph)
    fp32 = []
    for node in inferred.graph.node:
        if node.op_type == "Cast":
            continue
        outs = [types.get(o) for o in node.output if o]
        if any(t == onnx.TensorProto.FLOAT for t in outs):
            fp32.append(node.name)
    return fp32


def _tensor_types(graph: onnx.GraphProto) -> dict[str, int]:
    types: dict[str, int] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        types[info.name] = info.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def _split(model: onnx.ModelProto, tail: set[str]) -> tuple[onnx.ModelProto, onnx.GraphProto]:
    """Cut ``model`` into a body model (to convert) and the FP32 tail graph (kept as is)."""
    graph = model.graph
    nodes = list(graph.node)
    tail = _close_tail(nodes, tail)
    body_nodes = [n for n in nodes if n.name not in tail]
    tail_nodes = [n for n in nodes if n.name in tail]

    produced_by_body = {o for n in body_nodes for o in n.output if o}
    boundary = _ordered_unique(i for n in tail_nodes for i in n.input if i in produced_by_body)
    boundary += [o.name for o in graph.output if o.name in produced_by_body and o.name not in boundary]

    infos = {v.name: v for v in [*graph.input, *graph.value_info, *graph.output]}
    missing = [name for name in boundary if name not in infos]
    if missing:
        raise PrecisionError(
            f"shape inference gave no type for {missing[0]}; cannot place the FP32 boundary there"
        )
    body_nodes, boundary, infos = _separate_shared_boundary(body_nodes, tail_nodes, boundary, infos)

    body_uses = {i for n in body_nodes for i in n.input}
    tail_uses = {i for n in tail_nodes for i in n.input}
    initializers = {t.name: t for t in graph.initializer}

    body_graph = onnx.helper.make_graph(
        body_nodes,
        graph.name,
        list(graph.input),
        [infos[name] for name in boundary],
        initializer=[initializers[name] for name in initializers if name in body_uses],
        value_info=[v for v in graph.value_info if v.name not in boundary],
    )
    body = onnx.helper.make_model(body_graph, opset_imports=list(model.opset_import))
    body.ir_version = model.ir_version

    # A tail initializer also used by the body would be converted there; the tail keeps its own copy.
    renamed = {name: f"{name}__fp32" for name in tail_uses if name in initializers and name in body_uses}
    tail_inits = []
    for name in sorted(tail_uses & initializers.keys()):
        copy = onnx.TensorProto()
        copy.CopyFrom(initializers[name])
        copy.name = renamed.get(name, name)
        tail_inits.append(copy)
    for node in tail_nodes:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]
    tail_graph = onnx.helper.make_graph(tail_nodes, "tail", [], [], initializer=tail_inits)
    return body, tail_graph


def _separate_shared_boundary(body_nodes: list[onnx.NodeProto], tail_nodes: list[onnx.NodeProto],
                              boundary: list[str], infos: dict[str, onnx.ValueInfoProto]
                              ) -> tuple[list[onnx.NodeProto], list[str], dict[str, onnx.ValueInfoProto]]:
    """Give the tail its own copy (an Identity) of each boundary tensor the body reads too.

    The converter casts a graph output back to FP32 and wires that Cast's output into every reader of the
    tensor, also the body's own FP16 nodes (a YOLOv8n export: the P3-P5 features feed the head and the next
    stage), which then mix an FP32 input with FP16 weights.
    """
    body_reads = {i for n in body_nodes for i in n.input}
    shared = [name for name in boundary if name in body_reads]
    if not shared:
        return body_nodes, boundary, infos
    copies = {name: f"{name}__to_fp32_tail" for name in shared}
    body_nodes = [*body_nodes, *(onnx.helper.make_node("Identity", [name], [copy], name=f"{copy}_identity")
                                 for name, copy in copies.items())]
    for node in tail_nodes:
        for index, name in enumerate(node.input):
            node.input[index] = copies.get(name, name)
    infos = dict(infos)
    for name, copy in copies.items():
        info = onnx.ValueInfoProto()
        info.CopyFrom(infos[name])
        info.name = copy
        infos[copy] = info
    return body_nodes, [copies.get(name, name) for name in boundary], infos


def _close_tail(nodes: Sequence[onnx.NodeProto], tail: set[str]) -> set[str]:
    """Drop tail nodes whose outputs the body reads, so every tail input comes from the body."""
    closed = set(tail)
    changed = True
    while changed:
        changed = False
        body_reads = {i for n in nodes if n.name not in closed for i in n.input}
        for node in nodes:
            if node.name in closed and any(o in body_reads for o in node.output):
                closed.discard(node.name)
                changed = True
    return closed


def _join(original: onnx.ModelProto, body: onnx.ModelProto, tail: onnx.GraphProto) -> onnx.ModelProto:
    graph = onnx.helper.make_graph(
        [*body.graph.node, *tail.node],
        original.graph.name,
        list(original.graph.input),
        list(original.graph.output),
        initializer=[*body.graph.initializer, *tail.initializer],
    )
    joined = onnx.helper.make_model(graph, opset_imports=list(original.opset_import))
    joined.ir_version = original.ir_version
    joined.producer_name = original.producer_name
    joined.producer_version = original.producer_version
    joined.doc_string = original.doc_string
    for prop in original.metadata_props:
        joined.metadata_props.add(key=prop.key, value=prop.value)
    onnx.helper.set_model_props(
        joined, {**{p.key: p.value for p in joined.metadata_props}, _FP16_MARKER_KEY: "fp16"}
    )
    return onnx.shape_inference.infer_shapes(joined)


def _ordered_unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)

