"""The deferred plans of a repository's other TensorRT steps (a two-stage build's classifier), built by
``python -m generator plan`` after the detector's: each model folder besides the detector's with a build spec."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath

import onnx

from generator.builder.stages.config.model_io import ModelIO
from generator.builder.stages.tensorrt.bindings import engine_io
from generator.builder.stages.tensorrt.builder import BuildSpec
from generator.builder.stages.tensorrt.child import REPORT_NAME, SPEC_NAME
from generator.builder.stages.tensorrt.errors import TensorRTError
from generator.builder.stages.tensorrt.plan_request import spec_problems
from generator.builder.stages.tensorrt.stage import build_plan_files, report_text


@dataclass(frozen=True)
class StepPlan:
    """One step's plan to build: its model, version folder, build spec and served ONNX."""

    model: str
    folder: str
    spec: BuildSpec
    onnx_bytes: bytes

    @property
    def plan_file(self) -> str:
        return f"{self.folder}/{self.spec.plan_path}"

    @property
    def report_file(self) -> str:
        return f"{self.folder}/{REPORT_NAME}"


def step_plans(files: dict[str, bytes], detector: str) -> list[StepPlan]:
    """The build specs of every model but ``detector``, each checked against its ONNX (KeyError/ValueError:
    incomplete or unreadable inputs; TensorRTError: a spec that does not fit its ONNX)."""
    plans = []
    for path in sorted(files):
        parts = PurePosixPath(path).parts
        if parts[-1] != SPEC_NAME or parts[0] == detector or len(parts) != 3:
            continue
        folder = "/".join(parts[:2])
        spec = BuildSpec.from_json(json.loads(files[path]))
        onnx_bytes = files[f"{folder}/{spec.onnx_path}"]
        if problems := spec_problems(spec, onnx.load_from_string(onnx_bytes)):
            raise TensorRTError(f"the build spec of {parts[0]} does not fit its ONNX: " + "; ".join(problems))
        plans.append(StepPlan(parts[0], folder, spec, onnx_bytes))
    return plans


def build_step_plans(files: dict[str, bytes], plans: list[StepPlan], timeout: float | None) -> dict[str, ModelIO]:
    """Build each plan here (a child process each), put it and its report into ``files``; the engines' I/O."""
    engines = {}
    for step in plans:
        data, report = build_plan_files(step.spec, step.onnx_bytes, timeout)
        files[step.plan_file] = data
        files[step.report_file] = report_text(report)
        engines[step.model] = engine_io(report.tensors)
    return engines
