"""The TensorRT plan of a two-stage build's classifier step: its build spec, the engine it must expose, the plan.

Derived without TensorRT, like the detector's (:mod:`plan_request`): one optimization profile over both inputs
(the crops [1..max_batch, K, S, S, 3] and their count [1..max_batch, 1]), the engine's I/O for the load rules, and
the plan built here in a child process unless ``--defer-plan`` leaves it to ``python -m generator plan``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from generator.builder.spec.options import BuildOptions
from generator.builder.stages.config.model_io import ModelIO
from generator.builder.stages.tensorrt.bindings import TensorDesc, engine_io
from generator.builder.stages.tensorrt.builder import BuildSpec
from generator.builder.stages.tensorrt.child import (
    REPORT_NAME,
    REPRODUCE_SCRIPT,
    SCRIPT_NAME,
    SPEC_NAME,
    spec_text,
)
from generator.builder.stages.tensorrt.errors import ProfileError
from generator.builder.stages.tensorrt.plan_request import ONNX_NAME, PLAN_NAME, spec_problems
from generator.builder.stages.tensorrt.profiles import ShapeProfile
from generator.serving import contract


@dataclass(frozen=True)
class ClassifierPlan:
    spec: BuildSpec
    files: dict[str, bytes]  # paths relative to the step's version folder
    engine: ModelIO  # what the built plan reports (or, deferred, what the spec will build)
    built: bool


def classifier_profiles(max_boxes: int, size: int, options: BuildOptions) -> tuple[ShapeProfile, ShapeProfile]:
    """Both inputs' shapes in the one optimization profile: batch 1..--max-batch (opt: --opt-batch)."""
    high = options.max_batch
    opt = options.tensorrt.opt_batch or high
    if not 1 <= opt <= high:
        raise ProfileError(f"--opt-batch must be between 1 and --max-batch ({high}), got {opt}")
    item = (max_boxes, size, size, 3)
    return (ShapeProfile(contract.CROPS, (1, *item), (opt, *item), (high, *item)),
            ShapeProfile(contract.CROP_COUNT, (1, 1), (opt, 1), (high, 1)))


def expected_classifier_engine(profiles: tuple[ShapeProfile, ...], max_boxes: int, top_k: int
                               ) -> tuple[TensorDesc, ...]:
    """The engine's I/O as TensorRT will report it for the wrapped graph and these profiles."""
    dtypes = {contract.CROPS: "UINT8", contract.CROP_COUNT: "INT32"}
    inputs = tuple(TensorDesc(p.input_name, dtypes[p.input_name], (-1, *p.min[1:]), True, (p.min, p.opt, p.max))
                   for p in profiles)
    rows = (-1, max_boxes, top_k)
    return (*inputs, TensorDesc(contract.BOX_CLASSES, "INT32", rows, False),
            TensorDesc(contract.BOX_SCORES, "FLOAT", rows, False))


def classifier_plan(wrapped: onnx.ModelProto, max_boxes: int, size: int, top_k: int,
                    options: BuildOptions) -> ClassifierPlan:
    """The spec (checked against the wrapped graph), reproduce script and, unless deferred, the plan."""
    trt = options.tensorrt
    profiles = classifier_profiles(max_boxes, size, options)
    spec = BuildSpec(onnx_path=ONNX_NAME, plan_path=PLAN_NAME, profiles=profiles,
                     workspace_bytes=int(trt.workspace_gib * (1 << 30)), optimization_level=trt.optimization_level,
                     hardware_compatibility=trt.hardware_compatibility, version_compatible=trt.version_compatible)
    if problems := spec_problems(spec, wrapped):
        raise ProfileError("the classifier's TensorRT build spec: " + "; ".join(problems))
    files = {SPEC_NAME: spec_text(spec).encode(), SCRIPT_NAME: REPRODUCE_SCRIPT.encode()}
    expected = expected_classifier_engine(profiles, max_boxes, top_k)
    if trt.defer_plan:
        return ClassifierPlan(spec, files, engine_io(expected), built=False)
    from generator.builder.stages.tensorrt.stage import build_plan_files, report_text

    data, report = build_plan_files(spec, wrapped.SerializeToString(), trt.timeout_s)
    files.update({PLAN_NAME: data, REPORT_NAME: report_text(report)})
    return ClassifierPlan(spec, files, engine_io(report.tensors), built=True)
