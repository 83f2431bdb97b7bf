"""The build's TensorRT stage: served ONNX -> build spec (+ plan on this GPU) -> detector config.

Everything the plan must be is derived first, without TensorRT (:mod:`plan_request`). Then either the plan
is built in a child process on this machine (a builder crash kills only the child) and its bindings are
checked against that derivation, or, with ``--defer-plan``, the repository is written without it and
``python -m generator plan`` builds it on the serving GPU host.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from generator.builder.spec.options import BuildOptions
from generator.builder.stages.config.model_io import ModelIO
from generator.builder.stages.tensorrt.bindings import engine_io
from generator.builder.stages.tensorrt.builder import BuildReport, BuildSpec
from generator.builder.stages.tensorrt.child import (
    REPORT_NAME,
    REPRODUCE_SCRIPT,
    SCRIPT_NAME,
    SPEC_NAME,
    run_build_in_child,
    spec_text,
)
from generator.builder.stages.tensorrt.errors import EngineBuildError
from generator.builder.stages.tensorrt.plan_request import (
    ONNX_NAME,
    PLAN_NAME,
    PlanRequest,
    plan_request,
    request_facts,
)
from generator.model.onnx_inspect import DetectorInfo


@dataclass(frozen=True)
class TensorRTArtifacts:
    request: PlanRequest
    files: dict[str, bytes]  # paths relative to the detector model folder
    plan: dict[str, Any] = field(default_factory=dict)  # the manifest's "tensorrt" record
    report: BuildReport | None = None  # None while the plan is pending


def timing_cache_dir() -> Path:
    from generator.cache import cache_root

    return cache_root() / "tensorrt"


def report_facts(report: BuildReport) -> dict[str, Any]:
    """The facts of a built plan that decide where it loads, for the manifest."""
    return {
        "tensorrt_version": report.tensorrt_version,
        "cuda_version": report.cuda_version,
        "driver_version": report.driver_version,
        "gpu_name": report.gpu_name,
        "compute_capability": report.compute_capability,
        "build_seconds": round(report.build_seconds, 1),
    }


def build_plan_files(spec: BuildSpec, onnx_bytes: bytes, timeout: float | None) -> tuple[bytes, BuildReport]:
    """Build the plan of ``spec`` (paths relative to its folder) in a child process, in a scratch folder.

    Returns the plan's bytes and the child's report; nothing is written anywhere else.
    """
    with tempfile.TemporaryDirectory(prefix="tde-trt-") as tmp:
        work = Path(tmp)
        (work / spec.onnx_path).write_bytes(onnx_bytes)
        report = run_build_in_child(spec, work, timeout=timeout, timing_cache_dir=timing_cache_dir())
        plan = work / spec.plan_path
        if not plan.is_file():
            raise EngineBuildError(f"the TensorRT build reported success but wrote no {spec.plan_path}")
        return plan.read_bytes(), report


def tensorrt_detector(served: onnx.ModelProto, info: DetectorInfo, options: BuildOptions) -> TensorRTArtifacts:
    """The detector's files (served ONNX, spec, script, warmup, plan unless deferred) and manifest record."""
    request = plan_request(served, info, options)
    onnx_bytes = served.SerializeToString()
    assert request.detector.warmup is not None  # a plan request always carries its warmup sample
    files = {
        f"1/{ONNX_NAME}": onnx_bytes,
        f"1/{SPEC_NAME}": spec_text(request.spec).encode(),
        f"1/{SCRIPT_NAME}": REPRODUCE_SCRIPT.encode(),
        f"warmup/{request.detector.warmup.file}": request.detector.warmup.data,
    }
    plan = {**request_facts(request, options), "status": "pending", "plan_file": f"1/{PLAN_NAME}",
            "spec_file": f"1/{SPEC_NAME}"}
    if options.tensorrt.defer_plan:
        return TensorRTArtifacts(request, files, plan)
    data, report = build_plan_files(request.spec, onnx_bytes, options.tensorrt.timeout_s)
    files[f"1/{PLAN_NAME}"] = data
    files[f"1/{REPORT_NAME}"] = report_text(report)
    return TensorRTArtifacts(request, files, {**plan, **report_facts(report), "status": "built"}, report)


def report_text(report: BuildReport) -> bytes:
    """The report as stored next to the plan (paths relative to it: the temporary build folder is gone)."""
    data = report.to_json()
    data["plan_path"] = PLAN_NAME
    if data.get("timing_cache_path"):
        data["timing_cache_path"] = Path(str(data["timing_cache_path"])).name
    return (json.dumps(data, indent=2) + "\n").encode()


def engine_of(artifacts: TensorRTArtifacts) -> ModelIO:
    """The engine's I/O for the load rules: the built plan's report, or what the spec will build."""
    tensors = artifacts.report.tensors if artifacts.report is not None else artifacts.request.engine
    return engine_io(tensors)
