"""Build the TensorRT plan of a repository on the machine that will serve it (``python -m generator plan``).

The repository was written by ``build --target tensorrt --defer-plan`` (anywhere, without TensorRT): it holds
the served ONNX, ``build_spec.json`` with the optimization profile, and the detector config derived from
both (a two-stage build: the classifier step's too, built after the detector's). Here the spec is checked against the ONNX and the config before any GPU work, the plan is built in a
child process with this machine's TensorRT, its bindings are checked the way Triton's TensorRT backend will,
and the repository is rewritten as a whole with the plan and its facts in ``manifest.json``: a failure at
any point leaves it exactly as it was.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

import onnx
from google.protobuf.message import DecodeError

from generator.builder.plan_steps import build_step_plans, step_plans
from generator.builder.stages.config.load_rules import parse, repository_violations
from generator.builder.stages.config.model_io import ModelIO
from generator.builder.stages.tensorrt.bindings import TensorDesc, engine_io
from generator.builder.stages.tensorrt.builder import BuildReport, BuildSpec
from generator.builder.stages.tensorrt.child import REPORT_NAME, probe_builder
from generator.builder.stages.tensorrt.errors import TensorRTError
from generator.builder.stages.tensorrt.plan_request import expected_engine, spec_problems
from generator.builder.stages.tensorrt.stage import build_plan_files, report_facts, report_text
from generator.repository.check import compare
from generator.repository.files import hash_files
from generator.repository.host import GpuInfo, MachineFacts
from generator.repository.manifest import MANIFEST_NAME, Manifest, PlanFacts, read_manifest, rebuild_command
from generator.repository.write import write_repository

logger = logging.getLogger(__name__)
_RUNTIME_PARTS = ("__pycache__",)


class PlanError(TensorRTError):
    """The repository's plan cannot be built here; the message says why and what to do."""


@dataclass(frozen=True)
class CompletedPlan:
    manifest: Manifest
    report: BuildReport


def _all_files(repository: Path) -> dict[str, bytes]:
    """Every file of the repository (reports and checkout files too: the rewrite must keep them)."""
    files = {}
    for path in sorted(repository.rglob("*")):
        rel = path.relative_to(repository)
        if path.is_file() and not any(part in _RUNTIME_PARTS for part in rel.parts) and rel.suffix != ".pyc":
            files[rel.as_posix()] = path.read_bytes()
    return files


def _pending_plan(manifest: Manifest, repository: Path, force: bool) -> PlanFacts:
    plan = manifest.plan
    if manifest.target != "tensorrt" or plan is None:
        raise PlanError(f"{repository} is a {manifest.target} repository; it has no TensorRT plan to build")
    if not plan.pending and not force:
        raise PlanError(f"{repository} already has its plan (TensorRT {plan.tensorrt_version} on {plan.gpu_name}); "
                        "pass --force to build it again on this machine")
    if plan.spec_file is None:
        raise PlanError(f"the manifest names no build spec for the plan; rebuild the repository with "
                        f"{rebuild_command(manifest, repository)} --defer-plan")
    mismatches = compare(manifest, None, repository)
    if mismatches:
        raise PlanError(f"the repository changed since it was built ({mismatches[0].message})")
    return plan


def _check(files: dict[str, bytes], detector: str, spec: BuildSpec, served: onnx.ModelProto,
           tensors: tuple[TensorDesc, ...] | None, pending: set[str], steps: Mapping[str, ModelIO] | None = None
           ) -> None:
    """The spec against the ONNX, then the detector config against the engine the way Triton will.

    ``tensors`` are the built engine's; before the build, the engine the spec makes of the ONNX. ``steps``: the
    other built plans' engines (generator.builder.plan_steps).
    """
    problems = spec_problems(spec, served)
    engine = tensors if tensors is not None else expected_engine(served, spec.profiles[0])
    if not problems:
        engines = {detector: engine_io(engine), **(steps or {})}
        problems = [str(v) for v in repository_violations(files, engines, pending)]
    if problems:
        raise PlanError("the build spec does not fit this repository: " + "; ".join(problems) +
                        "; rebuild the repository with python -m generator build --target tensorrt --defer-plan")


def complete_plan(repository: Path, force: bool = False, timeout: float | None = None) -> CompletedPlan:
    """Build ``repository``'s plan here from its spec, record it in the manifest, write everything at once."""
    manifest = read_manifest(repository)
    plan = _pending_plan(manifest, repository, force)
    files = _all_files(repository)
    version_dir = str(PurePosixPath(plan.spec_file or "").parent)
    detector = PurePosixPath(plan.plan_file).parts[0]
    try:
        spec = BuildSpec.from_json(json.loads(files[plan.spec_file or ""]))
        onnx_bytes = files[f"{version_dir}/{spec.onnx_path}"]
        served = onnx.load_from_string(onnx_bytes)
        parse(detector, files[f"{detector}/config.pbtxt"].decode())
        steps = step_plans(files, detector)
    except (KeyError, ValueError, DecodeError) as exc:
        raise PlanError(f"the repository's build inputs are incomplete or unreadable ({exc}); rebuild it with "
                        f"{rebuild_command(manifest, repository)}") from exc
    if spec.plan_path != PurePosixPath(plan.plan_file).name:
        raise PlanError(f"the build spec writes {spec.plan_path!r} but the detector loads "
                        f"{PurePosixPath(plan.plan_file).name!r}; rebuild the repository with --defer-plan")
    files.pop(plan.plan_file, None)
    files.pop(f"{version_dir}/{REPORT_NAME}", None)
    for step in steps:
        files.pop(step.plan_file, None)
        files.pop(step.report_file, None)
    _check(files, detector, spec, served, None, {plan.plan_file, *(step.plan_file for step in steps)})
    probe_builder()  # the spec fits: now say what this machine lacks, if anything, before building
    data, report = build_plan_files(spec, onnx_bytes, timeout)
    files[plan.plan_file] = data
    files[f"{version_dir}/{REPORT_NAME}"] = report_text(report)
    engines = build_step_plans(files, steps, timeout)  # a two-stage build's classifier
    _check(files, detector, spec, served, report.tensors, set(), engines)
    facts = {**plan.to_json(), **report_facts(report), "status": "built"}
    files.pop(MANIFEST_NAME, None)
    updated = replace(manifest, plan=PlanFacts.from_json(facts), files=hash_files(files))
    files[MANIFEST_NAME] = updated.to_bytes()
    write_repository(repository, files)
    _recheck(repository, report)
    return CompletedPlan(updated, report)


def _recheck(repository: Path, report: BuildReport) -> None:
    """The written repository against the machine the child built on (the same one, by construction)."""
    gpus = (GpuInfo(report.gpu_name, report.compute_capability),) if report.gpu_name and report.compute_capability \
        else ()
    machine = MachineFacts(report.tensorrt_version, report.cuda_version, report.driver_version, gpus,
                           "the TensorRT that built the plan")
    mismatches = compare(read_manifest(repository), machine, repository)
    if mismatches:
        raise PlanError(f"the plan was written but the repository does not check: {mismatches[0].message}")
