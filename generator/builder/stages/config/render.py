"""Render every config.pbtxt from jinja2 templates, parse it with Triton's own schema, check the wiring."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jinja2
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.spec.options import BuildOptions
from generator.builder.stages.admission import MIN_BUDGET_MS, build_admission
from generator.builder.stages.config.detector_io import (
    DetectorIO,
    declared_io,
    detector_io,
    image_layout,
    item_image_dims,
)
from generator.builder.stages.config.load_rules import check_ensemble_wiring, parse
from generator.builder.stages.config.task_io import (
    classifies,
    task_ensemble_parameters,
    task_outputs,
    task_preprocess_parameters,
    task_step_parameters,
)
from generator.errors import ConfigError
from generator.model.onnx_inspect import DetectorInfo
from generator.repository.admission_record import Admission
from generator.serving import contract
from generator.serving.cuda_provider import DEVICE_PARAMETER
from generator.serving.cuda_provider import SETTINGS as CUDA_SETTINGS
from generator.serving.provider_check import CHECK_FILE, CHECK_PARAMETER

_DETECTOR_TEMPLATES = {
    "embedded": "detector_embedded.pbtxt.j2",
    "onnxruntime": "detector_onnxruntime.pbtxt.j2",
    "tensorrt": "detector_tensorrt.pbtxt.j2",
}
# ONNX Runtime's TensorRT provider builds in the graph's own precision (Q/DQ needs INT8 enabled).
_ORT_TENSORRT_PRECISION = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8"}


def _pbtxt_string(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("generator.builder.stages.config", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["pbtxt_string"] = _pbtxt_string
    env.globals["contract"] = contract
    return env


@dataclass(frozen=True)
class RenderedModel:
    name: str
    text: str
    config: mc.ModelConfig


def parse_config(name: str, text: str) -> mc.ModelConfig:
    """Parse ``text`` with Triton's ModelConfig proto; unknown fields or bad enums raise ConfigError."""
    return parse(name, text)


def ort_tensorrt_accelerator(io: DetectorIO, options: BuildOptions) -> dict[str, Any]:
    """ONNX Runtime's TensorRT provider with an engine cache and one profile covering every batch size.

    Without explicit profile shapes the provider rebuilds its engine whenever a larger batch arrives, in
    the middle of serving; the warmup builds (or loads from the cache) the one engine at load time.
    """
    name = io.input.name
    if any(ch in name for ch in ",:"):
        raise ConfigError(f"--ort-tensorrt cannot name input '{name}' in profile shapes (',' or ':' in the name)")
    if io.warmup is None:
        raise ConfigError("--ort-tensorrt needs the detector's concrete input shape")
    item = io.warmup.dims  # one image's shape; the full shape when the detector does not batch

    def shape(batch: int | None) -> str:
        dims = item if batch is None else (batch, *item)
        return f"{name}:{'x'.join(map(str, dims))}"

    batches = (None, None, None) if not io.max_batch_size else (
        1, options.tensorrt.opt_batch or io.max_batch_size, io.max_batch_size)
    return {"name": "tensorrt", "parameters": {
        "precision_mode": _ORT_TENSORRT_PRECISION[options.precision],
        "max_workspace_size_bytes": str(int(options.tensorrt.workspace_gib * (1 << 30))),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": options.ort_engine_cache,
        "trt_profile_min_shapes": shape(batches[0]),
        "trt_profile_opt_shapes": shape(batches[1]),
        "trt_profile_max_shapes": shape(batches[2]),
    }}


def gpu_detector_parameters(options: BuildOptions, image_size: tuple[int, int]) -> dict[str, str]:
    """Config parameters of a detector on ONNX Runtime's CUDA provider ({} for other detectors).

    One set of settings for both (``generator.serving.cuda_provider.SETTINGS``, which says why each). The embedded
    Python-backend detector reads them from its parameters and takes its input where the preprocess left it (GPU
    memory, from the GPU preprocess); the served image size lets it warm its sessions up when the export leaves
    the spatial size open. Triton's ONNX Runtime backend gets them in its ``cuda`` accelerator
    (``cuda_accelerator``) and again here as the legacy parameters: whenever a config has parameters, the backend
    resets these options from them.
    """
    if options.detector_device != "gpu" or options.target == "tensorrt":
        return {}
    if options.target == "embedded":
        height, width = image_size
        # The control images the detector checks its provider with at load (generator/serving/provider_check.py).
        check = {CHECK_PARAMETER: CHECK_FILE} if options.normalise_in == "graph" else {}
        return {DEVICE_PARAMETER: "gpu", "FORCE_CPU_ONLY_INPUT_TENSORS": "no", "input_height": str(height),
                "input_width": str(width), **CUDA_SETTINGS.parameters(), **check}
    return CUDA_SETTINGS.legacy_parameters()


def cuda_accelerator() -> dict[str, Any]:
    """Triton's ONNX Runtime backend: the CUDA provider's options (also the fallback of its TensorRT provider)."""
    return {"name": "cuda", "parameters": CUDA_SETTINGS.parameters()}


def preferred_batch_sizes(static_batch: int | None, max_batch_size: int, options: BuildOptions) -> list[int]:
    """The embedded detector's preferred batch: a static-batch export's own size, when it batches at all.

    Its runner cuts a larger batch into runs of the static size, one after another on one instance: the first
    image waits for the last and the other instances idle. Measured on yolov8n (static batch 1, 2 cores,
    docs/PERFORMANCE.md, issue 27). Dynamic-batch exports and the native backends keep Triton's largest batch.
    """
    if options.target != "embedded" or static_batch is None or max_batch_size <= static_batch:
        return []
    return [static_batch]


def _detector_context(io: DetectorIO, options: BuildOptions, parameters: dict[str, str],
                      batching: dict[str, Any], cuda_graphs: bool, image_size: tuple[int, int],
                      static_batch: int | None = None) -> dict[str, Any]:
    kind = "KIND_GPU" if options.detector_device == "gpu" else "KIND_CPU"
    accelerators = [ort_tensorrt_accelerator(io, options)] if options.ort_tensorrt else []
    if options.target == "onnxruntime" and options.detector_device == "gpu":
        accelerators.append(cuda_accelerator())
    return {
        **batching,
        "name": options.model_names["detector"],
        "max_batch_size": io.max_batch_size,
        "preferred_batch_sizes": preferred_batch_sizes(static_batch, io.max_batch_size, options),
        "input_name": io.input.name,
        "input_dtype": io.input.data_type,
        "input_dims": list(io.input.dims),
        "output_name": io.output.name,
        "output_dtype": io.output.data_type,
        "output_dims": list(io.output.dims),
        "protos": io.protos,
        "instances": options.detector_instances,
        "instance_kind": kind,
        "cuda_graphs": cuda_graphs,
        "warmup": io.warmup,
        "gpu_accelerators": accelerators,
        "parameters": {**gpu_detector_parameters(options, image_size), **parameters},
    }


def _preprocess_context(info: DetectorInfo, options: BuildOptions, io: DetectorIO, parameters: dict[str, str],
                        batching: dict[str, Any]) -> dict[str, Any]:
    height, width = info.image_size
    limits = options.limits
    return {
        **batching,
        **preprocess_placement(options),
        "name": options.model_names["preprocess"],
        "max_batch_size": options.max_batch,
        "image_dtype": io.input.data_type,
        "image_dims": list(item_image_dims(image_layout(options), info.image_size)),
        "instances": options.preprocess_instances,
        "parameters": {
            "input_height": str(height),
            "input_width": str(width),
            "max_image_bytes": str(limits.max_bytes),
            "max_image_pixels": str(limits.max_pixels),
            "max_image_side": str(limits.max_side),
            "reduced_decode": "true" if options.reduced_decode else "false",
            "output_dtype": "uint8" if options.normalise_in == "graph" else info.input.numpy_dtype,
            **({"preprocess_device": "gpu"} if options.preprocess_device == "gpu" else {}),
            **({"gpu_handoff": "host"} if options.preprocess_handoff == "host" else {}),
            **task_preprocess_parameters(info),
            **parameters,
        },
    }


def preprocess_placement(options: BuildOptions) -> dict[str, str]:
    """``--preprocess-device gpu`` puts the preprocess instances on the GPU (KIND_GPU: ``count`` on each GPU).

    Its IMAGE input is BYTES, which the Python backend always hands over in CPU memory; its PREPROCESSED output
    is a device tensor (DLPack). A TensorRT detector (KIND_GPU) reads it in place; a Python-backend detector or
    NMS step keeps the default FORCE_CPU_ONLY_INPUT_TENSORS "yes" and gets it copied to the host by Triton
    (python_backend README, "Input Tensor Device Placement").
    """
    return {"instance_kind": "KIND_GPU"} if options.preprocess_device == "gpu" else {}


def fused_context(preprocess: dict[str, Any], detector: dict[str, Any]) -> dict[str, Any]:
    """``--fuse-preprocess``: the detector step takes the encoded images and reads both steps' parameters (they
    agree where they share a key: the served image size). Its instances and batching are the detector's (the
    embedded detector batches up to --max-batch, as the preprocess does), on the GPU when either half runs there."""
    on_gpu = "KIND_GPU" in (preprocess.get("instance_kind"), detector["instance_kind"])
    return {**detector, "instance_kind": "KIND_GPU" if on_gpu else "KIND_CPU",
            "parameters": {**preprocess["parameters"], **detector["parameters"]}}


def _nms_context(info: DetectorInfo, options: BuildOptions, io: DetectorIO, parameters: dict[str, str],
                 batching: dict[str, Any]) -> dict[str, Any]:
    return {
        **batching,
        "name": options.model_names["nms"],
        "max_batch_size": options.max_batch,
        "raw_name": io.output.name,
        "raw_dtype": io.output.data_type,
        "raw_dims": list(io.item_output_dims),
        "protos": {"name": io.protos.name, "data_type": io.protos.data_type, "dims": list(io.item_protos_dims)}
        if io.protos else None,
        "max_detections": options.max_detections,
        "task_outputs": task_outputs(info, options.max_detections, options.top_k),
        "classify": classifies(info),
        "instances": options.nms_instances,
        "parameters": {
            "layout": info.layout,
            "conf_threshold": repr(options.conf_threshold),
            "iou_threshold": repr(options.iou_threshold),
            "max_detections": str(options.max_detections),
            **task_step_parameters(info, options.top_k),
            **parameters,
        },
    }


@dataclass(frozen=True)
class SecondStageRender:
    """A two-stage build's crop and classifier steps: their templates and values given the batching context and
    the preprocess's image parameters, and what the ensemble template adds (``second_stage``)."""

    contexts: Callable[[dict[str, Any], dict[str, str]], dict[str, tuple[str, dict[str, Any]]]]
    ensemble: dict[str, Any]


def _image_limits(options: BuildOptions) -> dict[str, str]:
    limits = options.limits
    return {"max_image_bytes": str(limits.max_bytes), "max_image_pixels": str(limits.max_pixels),
            "max_image_side": str(limits.max_side)}


def batching_context(options: BuildOptions, admission: Admission) -> dict[str, Any]:
    """Template values of ``_batching.pbtxt.j2``: the queue policy the build's admission sized."""
    policy = admission.policy
    return {
        "instance_kind": "KIND_CPU",
        "queue_delay_us": options.queue_delay_us,
        "queue_timeout_us": policy.timeout_us,
        "max_queue_size": policy.max_queue_size,
        "priority_levels": policy.priority_levels,
        "default_priority_level": policy.default_priority_level,
        "probe_priority_level": policy.probe_priority_level,
    }


def decode_budget_ms(options: BuildOptions) -> float:
    """How long one image's decode may take (0: no decode budget): ``--max-decode-ms``, else an explicit
    ``--max-queue-ms``, else the floor of a derived queue budget.

    The decode budget guards against one hostile image, whose cost does not grow with the detector's: a derived
    queue budget follows the time of a whole batch (seconds for a large model on a small CPU), the decode of one
    image does not.
    """
    if options.limits.max_decode_ms is not None:
        return options.limits.max_decode_ms
    return options.max_queue_ms if options.max_queue_ms is not None else MIN_BUDGET_MS


def decode_parameters(options: BuildOptions) -> dict[str, str]:
    """The preprocess step's per-image work limits beyond the header limits (0 ms: no decode budget)."""
    return {"max_jpeg_scans": str(options.limits.max_jpeg_scans),
            "max_decode_ms": repr(float(decode_budget_ms(options)))}


def render_models(
    info: DetectorInfo,
    options: BuildOptions,
    extra_parameters: dict[str, dict[str, str]] | None = None,
    detector: DetectorIO | None = None,
    admission: Admission | None = None,
    version: int | None = None,
    second_stage: SecondStageRender | None = None,
) -> dict[str, RenderedModel]:
    """Render, parse and cross-check the four configs; returns them keyed by model name.

    ``info`` describes the *served* detector graph (after precision and the normalisation prefix);
    ``detector`` is its config I/O as the backend will see it (default: as the ONNX declares it).
    ``admission`` (the build's, from its measured service time) sizes the queues; without it the options' own
    (``--max-queue-ms``, ``--service-ms``; without a service time the queues hold two batches). ``version`` (a versioned repository) gives every config the version policy of that folder
    and pins the ensemble's steps to it. ``second_stage``: a two-stage build's further steps
    (generator.builder.second_stage), rendered and wired like the others.
    """
    env = _environment()
    io = detector or detector_io(declared_io(info), info, options)
    batching = batching_context(options, admission or build_admission(options, None))
    extra = extra_parameters or {}
    cuda_graphs = options.target == "tensorrt" and options.tensorrt.cuda_graphs
    preprocess_parameters = {**decode_parameters(options), **extra.get("preprocess", {})}
    preprocess = _preprocess_context(info, options, io, preprocess_parameters, batching)
    detector_step = _detector_context(io, options, extra.get("detector", {}), batching, cuda_graphs,
                                      info.image_size, info.static_batch)
    contexts: dict[str, tuple[str, dict[str, Any]]] = {
        "preprocess": ("preprocess.pbtxt.j2", preprocess),
        "detector": (_DETECTOR_TEMPLATES[options.target], detector_step),
        "nms": ("nms.pbtxt.j2", _nms_context(info, options, io, extra.get("nms", {}), batching)),
    }
    if options.fused:
        del contexts["preprocess"]
        contexts["detector"] = ("detector_fused.pbtxt.j2", fused_context(preprocess, detector_step))
    if second_stage is not None:
        contexts.update(second_stage.contexts(batching, {**_image_limits(options), **preprocess_parameters}))
    rendered: dict[str, RenderedModel] = {}
    for step, (template, context) in contexts.items():
        text = env.get_template(template).render(**context, version=version)
        rendered[step] = RenderedModel(context["name"], text, parse_config(context["name"], text))
    ensemble_parameters = {**extra.get("ensemble", {}), **(second_stage.ensemble["parameters"] if second_stage else {})}
    ensemble = _render_ensemble(env, info, options, io, rendered, ensemble_parameters, version,
                                second_stage.ensemble if second_stage else None)
    models = {r.name: r for r in (ensemble, *rendered.values())}
    check_ensemble_wiring(ensemble.config, {r.name: r.config for r in rendered.values()})
    return models


def _render_ensemble(env: jinja2.Environment, info: DetectorInfo, options: BuildOptions, io: DetectorIO,
                     steps: dict[str, RenderedModel], parameters: dict[str, str],
                     version: int | None = None, second_stage: dict[str, Any] | None = None) -> RenderedModel:
    names = options.model_names
    # A step that does not batch (max_batch_size 0: a static batch-1 export) takes one image per request.
    max_batch = min(r.config.max_batch_size or 1 for r in steps.values())
    text = env.get_template("ensemble.pbtxt.j2").render(
        name=options.name,
        max_batch_size=max_batch,
        max_detections=options.max_detections,
        task_outputs=task_outputs(info, options.max_detections, options.top_k),
        classify=classifies(info),
        preprocess=None if options.fused else names["preprocess"],
        detector=names["detector"],
        nms=names["nms"],
        detector_input=io.input.name,
        detector_output=io.output.name,
        protos=io.protos.name if io.protos else None,
        parameters={contract.CLASS_NAMES_PARAMETER: json.dumps(list(info.class_names)),
                    **task_ensemble_parameters(info), **parameters},
        version=version,
        step_version=-1 if version is None else version,
        second_stage=second_stage,
    )
    return RenderedModel(options.name, text, parse_config(options.name, text))
