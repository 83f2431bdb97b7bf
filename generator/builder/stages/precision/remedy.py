"""The remedy for a failed accuracy gate: keep the layers that add the most error in higher precision, re-check.

The layer-wise diagnosis (:mod:`generator.evaluation.layerwise`) runs the FP32 source and the lowered graph on
the gate's control images and ranks the lowered layers by the error each adds to its inputs'. ``--auto-keep N``
keeps the worst ones out of the lower precision (``--int8-exclude`` / ``--fp16-keep``), ``KEEP_PER_ROUND`` at a
time, and re-runs the precision stage and the gate, until the gate passes or N layers are kept. The kept layers
and why go into the manifest; they are in the recorded options, so the rebuild command reproduces the graph.
An INT8 re-run reuses the calibration ranges (the range cache does not depend on the exclusions).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx

from generator.builder.spec.options import BuildOptions
from generator.builder.stages.precision.int8 import OP_TYPES_TO_QUANTIZE
from generator.evaluation.gate import GateReport
from generator.evaluation.layerwise import LayerwiseReport, compare_layers, decisions_from_facts, remedy_flag
from generator.model.onnx_inspect import DetectorInfo

logger = logging.getLogger(__name__)
KEEP_PER_ROUND = 2
# The diagnosis runs every tensor of both graphs: a few images locate the error as well as the whole set.
DIAGNOSIS_IMAGES = 4

Lower = Callable[[onnx.ModelProto, DetectorInfo, BuildOptions], tuple[onnx.ModelProto, dict[str, str]]]
Measure = Callable[[onnx.ModelProto], GateReport]


@dataclass(frozen=True)
class Remedied:
    """The lowered graph that was gated last, its facts and gate report, and the options that made it."""

    model: onnx.ModelProto
    facts: dict[str, str]
    report: GateReport
    options: BuildOptions
    diagnosis: LayerwiseReport | None  # of the last failing graph, when one failed


def with_kept(options: BuildOptions, nodes: Sequence[str]) -> BuildOptions:
    """``options`` with ``nodes`` added to the precision's keep list."""
    precision = options.calibration
    if options.precision == "int8":
        precision = dataclasses.replace(precision, int8_exclude=(*precision.int8_exclude, *nodes))
    else:
        precision = dataclasses.replace(precision, fp16_keep=(*precision.fp16_keep, *nodes))
    return dataclasses.replace(options, calibration=precision)


def diagnose(source: onnx.ModelProto, lowered: onnx.ModelProto, facts: dict[str, str], info: DetectorInfo,
             precision: str, images: Sequence[bytes]) -> LayerwiseReport:
    return compare_layers(source, lowered, images[:DIAGNOSIS_IMAGES], info.image_size, precision,
                          decisions_from_facts(facts))


def lower_and_gate(source: onnx.ModelProto, info: DetectorInfo, options: BuildOptions, lower: Lower,
                   measure: Measure, images: Sequence[bytes]) -> Remedied:
    """Lower ``source`` to ``options.precision`` and gate it; on failure keep the worst layers and retry."""
    budget = options.calibration.auto_keep
    kept: dict[str, str] = {}
    attempt = 1
    while True:
        model, facts = lower(source, info, options)
        report = measure(model)
        if report.passed:
            return Remedied(model, _with_record(facts, kept), report, options, None)
        diagnosis = diagnose(source, model, facts, info, options.precision, images)
        logger.warning("accuracy gate failed (drop %.2f pt); %s", report.drop_points,
                       diagnosis.to_markdown(rows=0).split("\n## All layers")[0])
        new = _next_kept(source, diagnosis, kept, options.precision, budget - len(kept), attempt)
        if not new:
            return Remedied(model, _with_record(facts, kept), report, options, diagnosis)
        kept.update({node: f"{why}; gate drop {report.drop_points:.2f} pt" for node, why in new.items()})
        logger.warning("--auto-keep: keeping %s out of %s (%s) and re-checking", ", ".join(new),
                       options.precision, remedy_flag(options.precision))
        options = with_kept(options, list(new))
        attempt += 1


def _next_kept(source: onnx.ModelProto, diagnosis: LayerwiseReport, kept: dict[str, str], precision: str,
               room: int, attempt: int) -> dict[str, str]:
    """The next layers to keep (the worst not kept yet, ``KEEP_PER_ROUND`` of them, at most ``room``), and why.

    INT8: ONNX Runtime's quantizer keeps one Q/DQ pair per tensor while any quantized Conv reads it, and every
    other reader (a residual Add, a Concat) then reads the rounded tensor too; the other Convs that read the
    same input are kept with a layer, so that the tensor's Q/DQ goes.
    """
    chosen: dict[str, str] = {}
    for layer in diagnosis.worst:
        if len(chosen) >= min(KEEP_PER_ROUND, room):
            break
        if layer.node in kept or layer.node in chosen:
            continue
        chosen[layer.node] = (f"re-check {attempt}: relative error {layer.rel:.3f}, {layer.introduced:+.3f} "
                              "over its inputs")
        if precision == "int8":
            for sibling in _readers_of_same_input(source, layer.node):
                chosen.setdefault(sibling, f"re-check {attempt}: reads the same INT8 input as {layer.node}")
    return dict(list((n, w) for n, w in chosen.items() if n not in kept)[:room])


def _readers_of_same_input(model: onnx.ModelProto, name: str) -> list[str]:
    node = next((n for n in model.graph.node if n.name == name), None)
    if node is None or node.op_type not in OP_TYPES_TO_QUANTIZE or not node.input:
        return []
    return [n.name for n in model.graph.node
            if n.op_type in OP_TYPES_TO_QUANTIZE and n.name != name and n.input[:1] == node.input[:1]]


def _with_record(facts: dict[str, str], kept: dict[str, str]) -> dict[str, str]:
    if not kept:
        return facts
    return {**facts, "auto_kept_nodes": ",".join(kept), "auto_kept_reasons": json.dumps(kept, sort_keys=True)}
