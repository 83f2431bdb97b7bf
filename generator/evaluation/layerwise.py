"""Layer-wise diagnosis: where an FP16/INT8 graph departs from its FP32 reference.

Both graphs run on the same preprocessed images with every intermediate tensor exposed as an output (what
``polygraphy run --onnxrt --onnx-outputs mark all`` does, here with ONNX Runtime directly: the comparison needs
the two graphs' structure anyway, and this adds no dependency). Tensors are matched by name: the FP16 converter
and ONNX Runtime's Q/DQ quantizer keep the names of the nodes they convert and give the Casts and the
QuantizeLinear/DequantizeLinear nodes they insert new ones, so those never match and drop out. Each layer's error
is measured against the reference (relative L2, absolute, cosine), and what it adds to the error of its inputs
(``introduced``) locates where the error starts rather than where it has spread to.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from generator.errors import GeneratorError
from generator.serving.batch import prepare_batch, to_float_nchw

logger = logging.getLogger(__name__)
# A layer whose relative error exceeds its inputs' by this much "jumps": the error starts there (a sound INT8
# calibration adds 1-3 % per layer on the fixtures; a range 50x too narrow adds 10-100x that).
JUMP_THRESHOLD = 0.05
JUMP_SHARE = 0.25
_EPS = 1e-12


@dataclass(frozen=True)
class LayerError:
    """One tensor compared: which node wrote it, in what precision and why, and how far it is off."""

    index: int  # position of its node in the reference graph's order
    tensor: str
    node: str
    op_type: str
    precision: str  # what the candidate computes it in: int8 (Q/DQ inputs), fp16 or fp32
    decision: str  # why it is in that precision (the manifest's record), "" when by default
    rel: float  # ||candidate - reference|| / ||reference||
    max_abs: float
    mean_abs: float
    cosine: float
    introduced: float  # rel minus the largest rel of its compared inputs


@dataclass(frozen=True)
class LayerwiseReport:
    precision: str
    provider: str
    images: int
    compared: int
    threshold: float  # a layer adding more relative error than this to its inputs' is where the error jumps
    layers: tuple[LayerError, ...]  # graph order
    first_jumps: tuple[LayerError, ...]  # the first layers (graph order) where the error jumps
    worst: tuple[LayerError, ...]  # the layers in the precision asked for that introduce the most error

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    def to_markdown(self, rows: int = 40) -> str:
        lines = [f"# Layer-wise error: {self.precision.upper()} ({self.provider}) against FP32 (CPU)", "",
                 f"{self.compared} tensors compared on {self.images} images; the error starts where a layer "
                 f"adds more than {self.threshold:.3g} relative error to its inputs'.", ""]
        lines += _section("First jumps (graph order)", self.first_jumps)
        lines += _section("Worst layers (most error introduced)", self.worst)
        shown = self.layers[:rows]
        lines += _section(f"All layers (first {len(shown)} of {len(self.layers)}; every one in the JSON)", shown)
        if self.first_jumps and self.worst:
            lines += [f"Keep them in higher precision: `{remedy_flag(self.precision)} "
                      f"{' '.join(layer.node for layer in self.worst)}`", ""]
        return "\n".join(lines)


def remedy_flag(precision: str) -> str:
    """The build flag that keeps named nodes out of ``precision``."""
    return "--int8-exclude" if precision == "int8" else "--fp16-keep"


def _section(title: str, layers: Sequence[LayerError]) -> list[str]:
    if not layers:
        return [f"## {title}", "", "none", ""]
    lines = [f"## {title}", "", "| # | node | op | precision | rel err | introduced | max abs | cosine | why |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {x.index} | `{x.node}` | {x.op_type} | {x.precision} | {x.rel:.4f} | {x.introduced:+.4f} | "
              f"{x.max_abs:.4g} | {x.cosine:.5f} | {x.decision or '-'} |" for x in layers]
    return [*lines, ""]


def expose_all(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every node output also a graph output (shape-inferred types where known)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = {v.name: v for v in inferred.graph.value_info}
    present = {o.name for o in inferred.graph.output}
    for node in inferred.graph.node:
        for name in node.output:
            if name and name not in present:
                inferred.graph.output.append(infos.get(name) or onnx.helper.make_empty_tensor_value_info(name))
                present.add(name)
    return inferred


class _Exposed:
    """A session over a graph with every tensor exposed."""

    def __init__(self, model: onnx.ModelProto, providers: Sequence[str]) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # Fusions would hide the tensors they fuse; the comparison wants the graph as written.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        exposed = expose_all(model)
        self.session = ort.InferenceSession(exposed.SerializeToString(), options, providers=list(providers))
        (model_input,) = self.session.get_inputs()
        self.input_name: str = model_input.name
        self.takes_uint8 = model_input.type == "tensor(uint8)"
        batch = model_input.shape[0]
        self.static_batch = batch if isinstance(batch, int) else None
        self.names = [o.name for o in self.session.get_outputs()]
        self.provider: str = self.session.get_providers()[0]

    def run(self, tensor: np.ndarray) -> dict[str, np.ndarray]:
        count = tensor.shape[0]
        static = self.static_batch or count
        repeated = static != count
        if repeated:  # one image: repeat it up to the static batch, compare the first copy
            tensor = np.repeat(tensor, static, axis=0)[:static]
        values = self.session.run(None, {self.input_name: tensor})
        return {name: value[:count] if repeated and value.ndim and value.shape[0] == static else value
                for name, value in zip(self.names, values, strict=True) if isinstance(value, np.ndarray)}


@dataclass
class _Sums:
    """Running sums over images of one tensor's difference."""

    diff2: float = 0.0
    ref2: float = 0.0
    cand2: float = 0.0
    dot: float = 0.0
    abs_sum: float = 0.0
    max_abs: float = 0.0
    count: int = 0

    def add(self, reference: np.ndarray, candidate: np.ndarray) -> None:
        ref, cand = reference.astype(np.float64).ravel(), candidate.astype(np.float64).ravel()
        diff = np.nan_to_num(cand - ref, nan=np.inf)
        self.diff2 += float(diff @ diff)
        self.ref2 += float(ref @ ref)
        self.cand2 += float(np.nan_to_num(cand) @ np.nan_to_num(cand))
        self.dot += float(ref @ np.nan_to_num(cand))
        self.abs_sum += float(np.abs(diff).sum())
        self.max_abs = max(self.max_abs, float(np.abs(diff).max(initial=0.0)))
        self.count += ref.size


def node_precisions(model: onnx.ModelProto) -> dict[str, str]:
    """Per node of a candidate graph: int8 (reads a DequantizeLinear), else its float type (fp16/fp32)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    producer = {o: n.op_type for n in inferred.graph.node for o in n.output}
    result = {}
    for node in inferred.graph.node:
        if any(producer.get(i) == "DequantizeLinear" for i in node.input):
            result[node.name] = "int8"
        elif any(types.get(o) == onnx.TensorProto.FLOAT16 for o in node.output):
            result[node.name] = "fp16"
        else:
            result[node.name] = "fp32"
    return result


def decisions_from_facts(facts: Mapping[str, str]) -> dict[str, str]:
    """Why nodes stayed in higher precision, from the manifest's precision facts."""
    why: dict[str, str] = {}
    for key, reason in (("excluded_nodes", "kept in float (head tail or --int8-exclude)"),
                        ("fp16_keep_nodes", "kept in FP32 (--fp16-keep)")):
        for node in filter(None, facts.get(key, "").split(",")):
            why[node] = reason
    for node, reason in json.loads(facts.get("auto_kept_reasons") or "{}").items():
        why[node] = f"auto-kept: {reason}"
    for node in json.loads(facts.get("fp32_fallback_reasons") or "{}"):
        why[node] = "FP32 fallback (conversion left the graph inconsistent)"
    return why


def compare_layers(reference: onnx.ModelProto, candidate: onnx.ModelProto, images: Sequence[bytes],
                   image_size: tuple[int, int], precision: str, decisions: Mapping[str, str] | None = None,
                   candidate_providers: Sequence[str] = ("CPUExecutionProvider",), worst: int = 5
                   ) -> LayerwiseReport:
    """Compare every tensor the two graphs share on the encoded ``images``, one image at a time.

    Each image goes through the serving preprocess once; the reference gets it as float NCHW, the candidate
    as it takes it (a served graph: uint8 NHWC into its normalisation prefix). ``decisions`` names why nodes
    are in higher precision (:func:`decisions_from_facts`); the reference always runs on the CPU.
    """
    ref_session = _Exposed(reference, ("CPUExecutionProvider",))
    cand_session = _Exposed(candidate, candidate_providers)
    order = [(i, node, name) for i, node in enumerate(reference.graph.node) for name in node.output if name]
    shared = {name for _, _, name in order} & set(cand_session.names)
    if not shared:
        raise GeneratorError("the two graphs share no tensor names: is the candidate built from this reference?")
    sums: dict[str, _Sums] = {}
    for data in images:
        batch = prepare_batch([data], image_size)
        if batch.errors:
            raise GeneratorError(f"control image rejected: {next(iter(batch.errors.values()))}")
        as_float = to_float_nchw(batch.images, np.float32)
        ref_out = ref_session.run(as_float)
        cand_out = cand_session.run(batch.images if cand_session.takes_uint8 else as_float)
        for name in shared:
            ref, cand = ref_out.get(name), cand_out.get(name)
            if (ref is None or cand is None or ref.dtype != np.float32 or ref.shape != cand.shape
                    or not np.issubdtype(cand.dtype, np.floating)):
                continue
            sums.setdefault(name, _Sums()).add(ref, cand)
    layers = _layers(reference, order, sums, node_precisions(candidate), decisions or {})
    # Only a layer computed in lower precision makes new error; an FP32 one (a SiLU's Mul) only carries it on.
    lowered_layers = [x for x in layers if x.precision != "fp32"]
    threshold = jump_threshold(lowered_layers)
    jumps = tuple(x for x in lowered_layers if x.introduced > threshold)[:worst]
    # The remedy's candidates: layers in the precision asked for (an INT8 build's FP16 float layers are not
    # quantized, so --int8-exclude would not change them).
    lowered = sorted((x for x in layers if x.precision == precision), key=lambda x: -x.introduced)
    return LayerwiseReport(precision, cand_session.provider, len(images), len(layers), threshold, tuple(layers), jumps,
                           tuple(x for x in lowered[:worst] if x.introduced > 0))


def jump_threshold(layers: Sequence[LayerError]) -> float:
    """``JUMP_THRESHOLD``, or a quarter of the most any layer adds when that is more: a broken layer stands out
    against the others of the same run, not against a fixed number that a sound but noisy layer may also pass."""
    return max(JUMP_THRESHOLD, JUMP_SHARE * max((x.introduced for x in layers), default=0.0))


def _layers(reference: onnx.ModelProto, order: Sequence[tuple[int, onnx.NodeProto, str]],
            sums: Mapping[str, _Sums], precisions: Mapping[str, str], decisions: Mapping[str, str]
            ) -> list[LayerError]:
    rel: dict[str, float] = {}
    layers = []
    for index, node, name in order:
        if name not in sums:
            continue
        s = sums[name]
        rel[name] = float(np.sqrt(s.diff2 / max(s.ref2, _EPS)))
        upstream = max((rel[i] for i in node.input if i in rel), default=0.0)
        cosine = s.dot / max(np.sqrt(s.ref2 * s.cand2), _EPS) if s.ref2 > 0 else float(s.cand2 == 0)
        layers.append(LayerError(index, name, node.name, node.op_type, precisions.get(node.name, "fp32"),
                                 decisions.get(node.name, ""), rel[name], s.max_abs, s.abs_sum / max(s.count, 1),
                                 float(cosine), rel[name] - upstream))
    return layers


def summary(report: LayerwiseReport) -> str:
    """One line: where the error starts."""
    if not report.first_jumps:
        return (f"layer-wise: no {report.precision} layer adds more than {report.threshold:.3g} relative error "
                f"({report.compared} tensors)")
    first = report.first_jumps[0]
    return (f"layer-wise: the {report.precision} error starts at {first.node} ({first.op_type}, {first.precision}, "
            f"relative error {first.rel:.3f}); worst: " + ", ".join(x.node for x in report.worst))


def report_files(report: LayerwiseReport) -> dict[str, bytes]:
    return {"layerwise.json": report.to_json().encode(), "layerwise.md": report.to_markdown().encode()}
