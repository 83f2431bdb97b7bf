"""Build a model repository: inspect -> precision -> normalisation prefix -> class reduction -> render -> write.

Library entry point of ``python -m generator build``; the command only turns argv into these calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto

from generator.builder.second_stage import (
    SecondStage,
    classifier_options,
    inspect_second_stage,
    prefixed,
    second_stage_files,
    second_stage_render,
    served_classifier,
)
from generator.builder.second_stage_platform import ClassifierStep, PlatformClassifier, platform_classifier
from generator.builder.spec.declarations import to_flags, to_record
from generator.builder.spec.options import BuildOptions, SpecError
from generator.builder.stages.admission import budget_warning, build_admission
from generator.builder.stages.config.detector_io import DetectorIO, declared_io, detector_io
from generator.builder.stages.config.load_rules import check_load_rules, parse
from generator.builder.stages.config.model_io import ModelIO, onnxruntime_io
from generator.builder.stages.config.render import render_models
from generator.builder.stages.config.stranding import stranding_warning
from generator.builder.stages.graph.nms import NMS_OUTPUT, NMS_ROWS, NmsSettings, add_nms
from generator.builder.stages.graph.placement import NmsPlacement, nms_placement
from generator.builder.stages.graph.prefix import SERVED_INPUT, add_normalisation_prefix
from generator.builder.stages.graph.suffix import REDUCED_OUTPUT, REDUCED_ROWS, add_class_reduction
from generator.builder.stages.provider_check_images import control_file, wants_check
from generator.builder.stages.service_time import measure_service_time
from generator.builder.tasks import require_served_task
from generator.demo import DEMO_ONNX
from generator.model.onnx_inspect import DetectorInfo, TensorInfo, inspect_onnx
from generator.repository.admission_record import Admission
from generator.repository.files import hash_files
from generator.repository.manifest import (
    MANIFEST_NAME,
    DetectorRecord,
    Manifest,
    PlanFacts,
    PreprocessRecord,
    Thresholds,
)
from generator.repository.write import write_repository
from generator.serving.contract import GRAPH_NMS_LAYOUT
from generator.serving.gpu.environment import detector_record
from generator.serving.gpu.environment import record as preprocess_record
from generator.serving.openvino_runner import ENGINE_PARAMETER
from generator.serving.provider_check import CHECK_FILE, CHECK_PARAMETER

if TYPE_CHECKING:
    from generator.builder.stages.precision.stage import PrecisionTransform
    from generator.evaluation.gate import GateReport

logger = logging.getLogger(__name__)
_STEP_SOURCES = {"preprocess": "preprocess.py", "detector": "detector.py", "nms": "nms.py"}


@dataclass(frozen=True)
class BuildResult:
    output: Path
    info: DetectorInfo
    models: tuple[str, ...]
    manifest: Manifest


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


def nms_info(info: DetectorInfo, options: BuildOptions) -> DetectorInfo:
    """Describe a detector whose served graph ends with NMS: padded [N, max_det, 6] rows out."""
    output = TensorInfo(NMS_OUTPUT, TensorProto.FLOAT, (info.output.shape[0], options.max_detections, NMS_ROWS))
    return dataclasses.replace(info, output=output, layout=GRAPH_NMS_LAYOUT)


def _python_step_files(model: str, source: str, gpu: bool = False, folder: str = "1") -> dict[str, bytes]:
    """model.py plus the shared helpers and the pure pipeline package (and ``gpu/`` if asked), copied next to it."""
    models = resources.files("generator.serving.models")
    pipeline = resources.files("generator.serving")
    files = {
        f"{model}/{folder}/model.py": models.joinpath(source).read_bytes(),
        f"{model}/{folder}/ensemble_common.py": models.joinpath("ensemble_common.py").read_bytes(),
    }
    packages = [(pipeline, "ensemble_pipeline")]
    if gpu:
        packages.append((pipeline.joinpath("gpu"), "ensemble_pipeline/gpu"))
    for package, copy_to in packages:
        for entry in package.iterdir():
            if entry.name.endswith(".py"):
                files[f"{model}/{folder}/{copy_to}/{entry.name}"] = entry.read_bytes()
    return files


def _fused_step_files(model: str, gpu: bool, folder: str = "1") -> dict[str, bytes]:
    """``--fuse-preprocess``: the fused model.py, and the preprocess and detector models beside it as the modules
    it runs (``detector_fused.py``)."""
    models = resources.files("generator.serving.models")
    files = _python_step_files(model, "detector_fused.py", gpu=gpu, folder=folder)
    for source, module in (("preprocess.py", "preprocess_step.py"), ("detector.py", "detector_step.py")):
        files[f"{model}/{folder}/{module}"] = models.joinpath(source).read_bytes()
    return files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_demo(onnx_path: Path) -> bool:
    """The bundled demo detector (by content, so a copy counts too)."""
    return onnx_path.resolve() == DEMO_ONNX.resolve() or (
        DEMO_ONNX.exists() and onnx_path.stat().st_size == DEMO_ONNX.stat().st_size
        and _sha256(onnx_path.read_bytes()) == _sha256(DEMO_ONNX.read_bytes()))


def require_domain_data(onnx_path: Path, options: BuildOptions) -> None:
    """A user's model is calibrated and gated on its own images, never on the demo's synthetic shapes."""
    if options.precision == "fp32" or is_demo(onnx_path):
        return
    if options.precision == "int8" and options.calibration.calib_images is None:
        raise SpecError("--precision int8 needs --calib-images DIR: a few hundred images of your own domain "
                        "(synthetic shapes only suit the bundled demo)")
    if options.gate.enabled and options.gate.images is None:
        raise SpecError(f"--precision {options.precision} runs an accuracy gate: pass --validate-images DIR "
                        "(and --validate-labels COCO.json if labelled), or --no-validate to skip it")


@dataclass(frozen=True)
class Lowered:
    """The graph the build serves after the precision stage and its gates, and what they recorded.

    ``recorded`` are the options as asked plus the layers ``--auto-keep`` kept (the manifest's options and
    rebuild command); ``served`` the same with the precision the speed gate kept.
    """

    model: onnx.ModelProto
    facts: dict[str, str]
    recorded: BuildOptions
    served: BuildOptions
    gate_files: dict[str, bytes]
    validated: bool


def _lower_precision(onnx_path: Path, model: onnx.ModelProto, info: DetectorInfo, options: BuildOptions,
                     precision_transform: PrecisionTransform | None) -> Lowered:
    """Precision stage, accuracy gate (with the ``--auto-keep`` remedy), then the speed gate."""
    if options.precision == "fp32":
        return Lowered(model, {}, options, options, {}, False)
    from generator.builder.stages.precision.stage import make_precision_transform

    def lower(source: onnx.ModelProto, info: DetectorInfo, asked: BuildOptions
              ) -> tuple[onnx.ModelProto, dict[str, str]]:
        return (precision_transform or make_precision_transform(asked.calibration))(source, info, asked)

    if not options.gate.enabled:
        lowered, facts = lower(model, info, options)
        return _speed_gated(model, lowered, facts, info, options, {}, validated=False)
    from generator.builder.stages.gate import accuracy_gate
    from generator.builder.stages.precision.remedy import lower_and_gate
    from generator.evaluation.gate import ensure_passed, load_control_set, report_files
    from generator.evaluation.layerwise import summary

    gate = options.gate
    control = load_control_set(gate.images, gate.labels, gate.count)

    def measure(lowered: onnx.ModelProto) -> GateReport:
        gated, info_gated = _served_graph(lowered, info, options)
        return accuracy_gate(onnx_path, gated, info, info_gated.layout, options.precision, control,
                             gate.max_drop_points, options.iou_threshold, options.max_detections)

    result = lower_and_gate(model, info, options, lower, measure, control.data)
    ensure_passed(result.report, summary(result.diagnosis) if result.diagnosis else None)
    return _speed_gated(model, result.model, result.facts, info, result.options, report_files(result.report),
                        validated=True)


def _speed_gated(source: onnx.ModelProto, lowered: onnx.ModelProto, facts: dict[str, str], info: DetectorInfo,
                 options: BuildOptions, gate_files: dict[str, bytes], validated: bool) -> Lowered:
    """Serve the lowered graph only where it is faster than FP32 (``--speed-gate``), and record the timing."""
    from generator.builder.stages.speed_gate import speed_gate

    candidate, info_served = _served_graph(lowered, info, options)
    reference, _ = _served_graph(source, info, options)
    decision = speed_gate(reference, candidate, info_served, options)
    facts = {**facts, "speed_gate": decision.to_fact()}
    if decision.kept == options.precision:
        return Lowered(lowered, facts, options, options, gate_files, validated)
    return Lowered(source, facts, options, dataclasses.replace(options, precision="fp32"), gate_files, validated)


def _detector_record(info: DetectorInfo, served_layout: str, options: BuildOptions,
                     placement: NmsPlacement | None) -> DetectorRecord:
    device = detector_record(options.detector_device, options.target == "embedded")
    return DetectorRecord(
        layout=info.layout, served_layout=served_layout, reduce_head=options.reduce_head and info.layout == "v8",
        image_size=info.image_size, static_batch=info.static_batch, class_names=tuple(info.class_names),
        normalise_in=options.normalise_in, reduced_decode=options.reduced_decode,
        nms_in_graph=served_layout == GRAPH_NMS_LAYOUT, nms_placement=placement.reason if placement else None,
        device=device["device"], requirements=tuple(device["requirements"]))


def _manifest(onnx_path: Path, output: Path, info: DetectorInfo, served_layout: str, options: BuildOptions,
              precision_facts: dict[str, str], files: dict[str, bytes], validated: bool,
              plan: dict[str, object] | None, admission: Admission,
              placement: NmsPlacement | None = None, recorded: BuildOptions | None = None) -> Manifest:
    """``options`` as served, ``recorded`` as asked (default: the same), for the options and rebuild records."""
    recorded = recorded or options
    if recorded.precision == "fp32":
        validation = "not needed (fp32)"
    else:
        validation = "accuracy gate passed" if validated else "skipped (--no-validate)"
        if options.precision != recorded.precision:
            validation += f"; the speed gate serves {options.precision}: {recorded.precision} was not faster"
    preprocess = preprocess_record(options.preprocess_device)
    return Manifest(
        name=options.name,
        target=options.target,
        precision=options.precision,
        onnx_sha256=_sha256(onnx_path.read_bytes()),
        source_onnx_path=str(onnx_path.resolve()),
        thresholds=Thresholds(options.conf_threshold, options.iou_threshold, options.max_detections),
        files=hash_files(files),
        validation_skipped=recorded.precision != "fp32" and not validated,
        validation=validation,
        calibration_method=precision_facts.get("calibration_method"),
        calibration_digest=precision_facts.get("calibration_digest"),
        max_batch=options.max_batch,
        plan=PlanFacts.from_json(plan) if plan else None,
        detector=_detector_record(info, served_layout, options, placement),
        preprocess=PreprocessRecord(preprocess["device"], tuple(preprocess["requirements"])),
        precision_facts=precision_facts,
        admission=admission,
        options=to_record(recorded),
        rebuild=tuple(rebuild_words(onnx_path, output, recorded)),
    )


def step_parameters(options: BuildOptions, head_name: str) -> dict[str, dict[str, str]]:
    """Parameters the Python-backend steps read from their configs, beyond what the templates derive."""
    extra: dict[str, dict[str, str]] = {"detector": {}, "nms": {"raw_output": head_name}}
    if options.target == "embedded":
        extra["detector"] = {"onnx_file": "model.onnx", "intra_op_threads": str(options.detector_thread_setting),
                             **({"spin_wait": spin} if (spin := options.detector_spin_setting) else {}),
                             **_engine_parameters(options)}
    elif options.target == "onnxruntime":
        extra["detector"] = onnxruntime_thread_parameters(options)
    return extra


def _engine_parameters(options: BuildOptions) -> dict[str, str]:
    """Another CPU engine (``--cpu-engine``) and the control images it is checked with at load."""
    if options.cpu_engine == "onnxruntime":
        return {}
    return {ENGINE_PARAMETER: options.cpu_engine, CHECK_PARAMETER: CHECK_FILE}


def onnxruntime_thread_parameters(options: BuildOptions) -> dict[str, str]:
    """Triton's ONNX Runtime backend: ``--detector-threads`` as its ``intra_op_thread_count`` per instance.

    Without it the backend leaves ONNX Runtime's default, every physical core of the host for each instance's
    session (a container's CPU limit unseen): several CPU instances then run that many threads each at once.
    The build cannot know the serving host's cores, so it says so instead of guessing.
    """
    if options.detector_threads > 0:
        return {"intra_op_thread_count": str(options.detector_threads)}
    if options.detector_device == "cpu" and options.detector_instances > 1:
        logger.warning("%d ONNX Runtime detector instances on the CPU each take every core of the host: pass "
                       "--detector-threads (the serving host's cores / %d) so they do not oversubscribe it",
                       options.detector_instances, options.detector_instances)
    return {}


def rebuild_words(onnx_path: Path, output: Path, options: BuildOptions) -> list[str]:
    """The exact command (as argv words) that builds this repository again."""
    return ["python", "-m", "generator", "build", "--onnx", str(onnx_path.resolve()),
            "--output", str(output.resolve()), *to_flags(options)]


def _served_graph(model: onnx.ModelProto, info: DetectorInfo, options: BuildOptions
                  ) -> tuple[onnx.ModelProto, DetectorInfo]:
    """The graph as served: normalisation prefix (uint8 images in), class reduction (v8 heads)."""
    served, info_served = model, info
    if options.normalise_in == "graph":
        served, info_served = add_normalisation_prefix(served), served_info(info_served)
    if options.reduce_head and info.layout == "v8":
        served, info_served = add_class_reduction(served), reduced_info(info_served)
    return served, info_served


def _with_nms(served: onnx.ModelProto, info_served: DetectorInfo, options: BuildOptions,
              placement: NmsPlacement) -> tuple[onnx.ModelProto, DetectorInfo]:
    """Append NMS to the served graph where it runs there (after the accuracy gate's graph)."""
    if not placement.in_graph:
        return served, info_served
    settings = NmsSettings(options.conf_threshold, options.iou_threshold, options.max_detections,
                           info_served.num_classes)
    shape = info_served.output.shape
    anchors = shape[2] if info_served.layout in ("v8", "v8_reduced") else shape[1]
    return (add_nms(served, info_served.layout, settings, anchors if isinstance(anchors, int) else None),
            nms_info(info_served, options))


@dataclass(frozen=True)
class DetectorBuild:
    """The detector model's files, its config I/O, the I/O its backend will check, and the plan record."""

    files: dict[str, bytes]
    io: DetectorIO
    backend_io: ModelIO | None  # platform detectors: what Triton's backend compares the config with
    plan: dict[str, object] | None = None
    pending: tuple[str, ...] = ()  # files written later (a deferred plan)


def _in_folder(path: str, folder: str) -> str:
    """A path the TensorRT stage writes under version folder 1, moved to ``folder``."""
    return f"{folder}/{path.removeprefix('1/')}" if path.startswith("1/") else path


def _detector_build(served: onnx.ModelProto, info_served: DetectorInfo, options: BuildOptions,
                    folder: str = "1") -> DetectorBuild:
    """Files and config I/O of the detector: the served ONNX, or the TensorRT plan and its inputs."""
    detector = options.model_names["detector"]
    if options.target != "tensorrt":
        onnx_bytes = served.SerializeToString()
        backend_io = onnxruntime_io(onnx_bytes) if options.target == "onnxruntime" else None
        io = detector_io(backend_io or declared_io(info_served), info_served, options)
        files = {f"{detector}/{folder}/model.onnx": onnx_bytes}
        if wants_check(options):  # the GPU detector checks its provider against the CPU's at load
            files[f"{detector}/{folder}/{CHECK_FILE}"] = control_file(onnx_bytes, info_served, options)
        if io.warmup is not None:
            files[f"{detector}/warmup/{io.warmup.file}"] = io.warmup.data
        return DetectorBuild(files, io, backend_io)
    from generator.builder.stages.tensorrt.stage import engine_of, tensorrt_detector

    artifacts = tensorrt_detector(served, info_served, options)
    files = {f"{detector}/{_in_folder(path, folder)}": data for path, data in artifacts.files.items()}
    plan = {**artifacts.plan, "plan_file": f"{detector}/{_in_folder(str(artifacts.plan['plan_file']), folder)}",
            "spec_file": f"{detector}/{_in_folder(str(artifacts.plan['spec_file']), folder)}"}
    pending = (plan["plan_file"],) if artifacts.report is None else ()
    return DetectorBuild(files, artifacts.request.detector, engine_of(artifacts), plan, pending)


def _model_files(info_served: DetectorInfo, options: BuildOptions, detector: DetectorBuild,
                 admission: Admission, version: int | None = None, second: SecondStage | None = None,
                 platform: PlatformClassifier | None = None) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """Every config.pbtxt, the ensemble's version folder and the Python-backend sources (and a two-stage
    build's classifier: ``platform`` on the native targets)."""
    names = options.model_names
    folder = str(version or 1)
    extra = step_parameters(options, info_served.output.name)
    rendered = render_models(info_served, options, extra, detector=detector.io, admission=admission,
                             version=version, second_stage=second_stage_render(second, options) if second else None)
    files = {f"{model_name}/config.pbtxt": r.text.encode() for model_name, r in rendered.items()}
    files[f"{options.name}/{folder}/.keep"] = b""  # an ensemble still needs a version folder
    if options.fused:
        files.update(_fused_step_files(names["detector"], options.preprocess_device == "gpu", folder))
        files.update(_python_step_files(names["nms"], _STEP_SOURCES["nms"], folder=folder))
    else:
        for step, source in _STEP_SOURCES.items():
            if step != "detector" or options.target == "embedded":
                gpu = step == "preprocess" and options.preprocess_device == "gpu"
                files.update(_python_step_files(names[step], source, gpu=gpu, folder=folder))
    if second is not None:
        files.update(second_stage_files(second, options, folder, _python_step_files, platform))
    return files, tuple(rendered)


def _lowered_second_stage(second: SecondStage | None, asked: BuildOptions,
                          precision_transform: PrecisionTransform | None
                          ) -> tuple[SecondStage | None, dict[str, bytes], dict[str, str]]:
    """A two-stage build's classifier through the same precision stage and gates as a classify export's (its gate
    on the build's --validate-images), served with its normalisation prefix; its reports and facts named apart."""
    if second is None or asked.precision == "fp32":
        return second, {}, {}
    options = classifier_options(asked)
    lowered = _lower_precision(second.info.path, onnx.load(str(second.info.path)), second.info, options,
                               precision_transform)
    served, _ = _served_graph(lowered.model, second.info, lowered.served)
    files, facts = prefixed(lowered.gate_files, {**lowered.facts, "precision": lowered.served.precision,
                                                 "validation": "accuracy gate passed" if lowered.validated
                                                 else "skipped (--no-validate)"})
    return dataclasses.replace(second, served=served), files, facts


def _platform_classifier(second: SecondStage | None, options: BuildOptions, folder: str
                         ) -> PlatformClassifier | None:
    """A two-stage build's classifier step on Triton's ONNX Runtime or TensorRT backend (None: embedded, or no
    second stage)."""
    if second is None or options.target == "embedded":
        return None
    step = ClassifierStep(second.names(options)["classifier"], second.info, second.max_boxes, second.size,
                          second.top_k)
    return platform_classifier(step, options, served_classifier(second), folder)


@dataclass(frozen=True)
class BuiltFiles:
    """A build in memory, checked and not yet written: the files (manifest last), what they are."""

    files: dict[str, bytes]
    info: DetectorInfo
    models: tuple[str, ...]
    manifest: Manifest
    pending: tuple[str, ...]


def build_repository(
    onnx_path: Path,
    output: Path,
    options: BuildOptions,
    force: bool = False,
    precision_transform: PrecisionTransform | None = None,
) -> BuildResult:
    """Build the whole repository in memory, check it, then write it atomically.

    For FP16/INT8 the accuracy gate runs on the served graph first; a failed gate writes nothing.
    ``precision_transform`` replaces the default precision stage (``generator.builder.stages.precision.stage``).
    """
    built = build_files(onnx_path, output, options, precision_transform)
    built.files[MANIFEST_NAME] = built.manifest.to_bytes()
    write_repository(output, built.files, force=force)
    if built.pending:
        logger.info("The TensorRT plan is still to be built: on the serving GPU host run "
                    "python -m generator plan %s", output)
    return BuildResult(output, built.info, built.models, built.manifest)


def _warn_single_instances(files: Mapping[str, bytes]) -> None:
    """Say which steps run one instance, where Triton's batcher can leave a request waiting (stranding.py)."""
    configs = {path.split("/")[0]: parse(path, data.decode()) for path, data in files.items()
               if path.endswith("/config.pbtxt")}
    if warning := stranding_warning(configs):
        logger.warning("%s", warning)


def build_files(onnx_path: Path, output: Path, options: BuildOptions,
                precision_transform: PrecisionTransform | None = None, version: int | None = None) -> BuiltFiles:
    """Every file of one build, checked against Triton's load rules (and the gate), plus its manifest.

    ``version`` writes the version folder ``version`` with its version policy instead of ``1``
    (generator.repository.versions); the manifest is returned, not among the files.
    """
    require_domain_data(onnx_path, options)
    if options.target == "tensorrt" and not options.tensorrt.defer_plan:
        from generator.builder.stages.tensorrt.child import probe_builder

        probe_builder()  # before any work: say what to install and where to run
    info = inspect_onnx(onnx_path, options.image_size)
    require_served_task(info, options)
    second = inspect_second_stage(info, options)
    if options.fused and version is not None:
        if options.fuse_preprocess == "on":
            raise SpecError("--fuse-preprocess on builds one unversioned repository for now: drop --version (a "
                            "rollout compares the preprocess steps of two versions)")
        logger.info("A versioned build keeps preprocess and detector apart (--fuse-preprocess auto)")
        options = dataclasses.replace(options, fuse_preprocess="off")
    if second is not None and version is not None:
        raise SpecError("--classifier builds one unversioned repository for now: drop --version (and build into "
                        "an --output without versions)")
    asked = options
    lowered = _lower_precision(onnx_path, onnx.load(str(onnx_path)), info, options, precision_transform)
    options = lowered.served
    gated, info_gated = _served_graph(lowered.model, info, options)
    # The gate measured the graph before NMS: it compares scores at its own low threshold, and the NMS suffix
    # is exact float32 selection whatever the precision (tests hold it to the Python step).
    placement = nms_placement(info_gated, options)
    served, info_served = _with_nms(gated, info_gated, options, placement)
    service = measure_service_time(served, info_served, options)
    admission = build_admission(options, service)
    budget = admission.budget
    logger.info("Queue budget %g ms (%s: %s)", budget.ms, budget.source, budget.basis)
    if warning := budget_warning(budget.ms, service.batch_ms):
        logger.warning("%s", warning)
    detector = _detector_build(served, info_served, options, str(version or 1))
    second, second_files, second_facts = _lowered_second_stage(second, asked, precision_transform)
    platform = _platform_classifier(second, options, str(version or 1))
    files = dict(detector.files)
    model_files, models = _model_files(info_served, options, detector, admission, version, second, platform)
    files.update(model_files)
    backend_io = {options.model_names["detector"]: detector.backend_io} if detector.backend_io else {}
    pending = {*detector.pending, *(platform.pending if platform else ())}
    if platform is not None and second is not None:
        backend_io[second.names(options)["classifier"]] = platform.backend_io
    check_load_rules(files, backend_io, pending)
    _warn_single_instances(files)
    files.update({**lowered.gate_files, **second_files})
    manifest = _manifest(onnx_path, output, info, info_served.layout, options, {**lowered.facts, **second_facts},
                         files, lowered.validated, detector.plan, admission, placement, lowered.recorded)
    return BuiltFiles(files, info, models, manifest, tuple(sorted(pending)))
