"""Build a model repository: inspect -> precision -> normalisation prefix -> class reduction -> render -> write.

Library entry point of ``python -m generator build``; the command only turns argv into these calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import onnx
from onnx import TensorProto

from generator.build.config.render import render_models
from generator.build.graph.prefix import SERVED_INPUT, add_normalisation_prefix
from generator.build.graph.suffix import REDUCED_OUTPUT, REDUCED_ROWS, add_class_reduction
from generator.build.onnx_inspect import DetectorInfo, TensorInfo, inspect_onnx
from generator.build.options import BuildOptions
from generator.build.repository import MARKER as MANIFEST_NAME
from generator.build.repository import write_repository
from generator.build.tensorrt.step import TensorRTOptions
from generator.errors import GeneratorError

_STEP_SOURCES = {"preprocess": "preprocess.py", "detector": "detector.py", "nms": "nms.py"}

# Turns the FP32 model into the requested precision; set by generator.build.precision (FP16/INT8).
PrecisionTransform = Callable[[onnx.ModelProto, DetectorInfo, BuildOptions], tuple[onnx.ModelProto, dict[str, str]]]


@dataclass(frozen=True)
class BuildResult:
    output: Path
    info: DetectorInfo
    models: tuple[str, ...]
    manifest: dict[str, object]


def served_info(info: DetectorInfo) -> DetectorInfo:
    """Describe the detector as served: uint8 BGR NHWC input from the normalisation prefix."""
    batch, _, height, width = info.input.shape
    served_input = TensorInfo(SERVED_INPUT, TensorProto.UINT8, (batch, height, width, 3))
    return dataclasses.replace(info, input=served_input)


def reduced_info(info: DetectorInfo) -> DetectorInfo:
    """Describe a v8 detector whose served graph ends with the class reduction: [N, 6, A] out.

    The layout is carried, not inferred: [N, 6, A] also reads as a two-class v8 head. Class names and
    count stay those of the original head.
    """
    batch, _, anchors = info.output.shape
    output = TensorInfo(REDUCED_OUTPUT, info.output.elem_type, (batch, REDUCED_ROWS, anchors))
    return dataclasses.replace(info, output=output, layout="v8_reduced")


def _python_step_files(model: str, source: str) -> dict[str, bytes]:
    """model.py plus the shared helpers and the pure pipeline package, copied next to it."""
    models = resources.files("generator.serving.models")
    pipeline = resources.files("generator.serving")
    files = {
        f"{model}/1/model.py": models.joinpath(source).read_bytes(),
        f"{model}/1/ensemble_common.py": models.joinpath("ensemble_common.py").read_bytes(),
    }
    for entry in pipeline.iterdir():
        if entry.name.endswith(".py"):
            files[f"{model}/1/ensemble_pipeline/{entry.name}"] = entry.read_bytes()
    return files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class GateOptions:
    """The accuracy gate run by ``build`` for FP16/INT8 before anything is written."""

    enabled: bool = True
    max_drop_points: float | None = None  # default per precision, see validate.DEFAULT_MAX_DROP
    images: Path | None = None
    labels: Path | None = None
    count: int = 64


def _run_gate(onnx_path: Path, served: onnx.ModelProto, info: DetectorInfo, served_layout: str,
              options: BuildOptions, gate: GateOptions) -> dict[str, bytes]:
    from generator.evaluation.gate import (
        DEFAULT_MAX_DROP,
        ensure_passed,
        gate_summary,
        load_control_set,
        report_files,
        run_gate,
    )

    max_drop = gate.max_drop_points if gate.max_drop_points is not None else DEFAULT_MAX_DROP[options.precision]
    control = load_control_set(gate.images, gate.labels, gate.count)
    with tempfile.TemporaryDirectory(prefix="tde-gate-") as tmp:
        candidate = Path(tmp) / "served.onnx"
        onnx.save(served, str(candidate))
        report = run_gate(onnx_path, candidate, info, control, options.precision, max_drop,
                          options.iou_threshold, options.max_detections, candidate_layout=served_layout)
    print(gate_summary(report), flush=True)
    ensure_passed(report)
    return report_files(report)


def _manifest(onnx_path: Path, info: DetectorInfo, served_layout: str, options: BuildOptions,
              precision_facts: dict[str, str], files: dict[str, bytes], validated: bool,
              plan: dict[str, object] | None) -> dict[str, object]:
    from generator.build.manifest import Manifest, PlanFacts, Thresholds, hash_files

    if options.precision == "fp32":
        validation = "not needed (fp32)"
    else:
        validation = "accuracy gate passed" if validated else "skipped (--no-validate)"
    record = Manifest(
        name=options.name,
        target=options.target,
        precision=options.precision,
        onnx_sha256=_sha256(onnx_path.read_bytes()),
        source_onnx_path=str(onnx_path.resolve()),
        thresholds=Thresholds(options.conf_threshold, options.iou_threshold, options.max_detections),
        files=hash_files(files),
        validation_skipped=options.precision != "fp32" and not validated,
        validation=validation,
        calibration_method=precision_facts.get("calibration_method"),
        calibration_digest=precision_facts.get("calibration_digest"),
        max_batch=options.max_batch,
        plan=PlanFacts.from_json({**plan, "plan_files": [f"{options.model_names['detector']}/1/model.plan"]})
        if plan else None,
        extra={
            "detector": {
                "layout": info.layout,
                "served_layout": served_layout,
                "reduce_head": served_layout == "v8_reduced",
                "image_size": list(info.image_size),
                "static_batch": info.static_batch,
                "class_names": list(info.class_names),
                "normalise_in": options.normalise_in,
                "reduced_decode": options.reduced_decode,
            },
            "precision_facts": precision_facts,
        },
    )
    return record.to_json()


def step_parameters(options: BuildOptions, head_name: str) -> dict[str, dict[str, str]]:
    """Parameters the Python-backend steps read from their configs, beyond what the templates derive."""
    extra: dict[str, dict[str, str]] = {"detector": {}, "nms": {"raw_output": head_name}}
    if options.target == "embedded":
        extra["detector"] = {"onnx_file": "model.onnx", "intra_op_threads": str(options.detector_threads)}
    return extra


def build_repository(
    onnx_path: Path,
    output: Path,
    options: BuildOptions,
    force: bool = False,
    precision_transform: PrecisionTransform | None = None,
    gate: GateOptions | None = None,
    tensorrt: TensorRTOptions | None = None,
) -> BuildResult:
    """Build the whole repository in memory, check it, then write it atomically.

    For FP16/INT8 the accuracy gate runs on the served graph first; a failed gate writes nothing.
    """
    gate = gate or GateOptions()
    if options.target == "tensorrt":
        from generator.build.tensorrt.availability import require_tensorrt_and_gpu

        require_tensorrt_and_gpu()  # before any work: say what to install and where to run
    info = inspect_onnx(onnx_path, options.image_size)
    model = onnx.load(str(onnx_path))
    precision_facts: dict[str, str] = {}
    if options.precision != "fp32":
        if precision_transform is None:
            raise GeneratorError(f"--precision {options.precision} is not available in this build")
        model, precision_facts = precision_transform(model, info, options)
    if options.normalise_in == "graph":
        served, info_served = add_normalisation_prefix(model), served_info(info)
    else:
        served, info_served = model, info
    if options.reduce_head and info.layout == "v8":
        served, info_served = add_class_reduction(served), reduced_info(info_served)

    names = options.model_names
    files: dict[str, bytes] = {}
    overrides: dict[str, object] = {}
    plan: dict[str, object] | None = None
    if options.target == "tensorrt":
        from generator.build.tensorrt.step import build_tensorrt_detector

        artifacts = build_tensorrt_detector(served, info_served, options, tensorrt or TensorRTOptions())
        files.update({f"{names['detector']}/{path}": data for path, data in artifacts.files.items()})
        overrides, plan = artifacts.overrides, artifacts.manifest
    else:
        files[f"{names['detector']}/1/model.onnx"] = served.SerializeToString()
    extra = step_parameters(options, info_served.output.name)
    rendered = render_models(info_served, options, extra, detector_overrides=overrides)
    for model_name, r in rendered.items():
        files[f"{model_name}/config.pbtxt"] = r.text.encode()
    files[f"{options.name}/1/.keep"] = b""  # an ensemble still needs a version folder
    for step, source in _STEP_SOURCES.items():
        if step == "detector" and options.target != "embedded":
            continue
        files.update(_python_step_files(names[step], source))

    validated = options.precision != "fp32" and gate.enabled
    if validated:
        files.update(_run_gate(onnx_path, served, info, info_served.layout, options, gate))
    manifest = _manifest(onnx_path, info, info_served.layout, options, precision_facts, files, validated, plan)
    files[MANIFEST_NAME] = (json.dumps(manifest, indent=2) + "\n").encode()
    write_repository(output, files, force=force)
    return BuildResult(output, info, tuple(rendered), manifest)
