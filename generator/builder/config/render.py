"""Render every config.pbtxt from jinja2 templates, parse it with Triton's own schema, check the wiring."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jinja2
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.onnx_inspect import DetectorInfo
from generator.builder.options import BuildOptions
from generator.errors import ConfigError
from generator.serving import contract

_DETECTOR_TEMPLATES = {
    "embedded": "detector_embedded.pbtxt.j2",
    "onnxruntime": "detector_onnxruntime.pbtxt.j2",
    "tensorrt": "detector_tensorrt.pbtxt.j2",
}


def _pbtxt_string(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("generator.builder.config", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["pbtxt_string"] = _pbtxt_string
    env.globals["contract"] = contract
    return env


def _dims(shape: tuple[int | str, ...]) -> list[int]:
    return [d if isinstance(d, int) else -1 for d in shape]


@dataclass(frozen=True)
class RenderedModel:
    name: str
    text: str
    config: mc.ModelConfig


def parse_config(name: str, text: str) -> mc.ModelConfig:
    """Parse ``text`` with Triton's ModelConfig proto; unknown fields or bad enums raise ConfigError."""
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"rendered config of '{name}' is not a valid Triton ModelConfig: {exc}") from exc


def detector_max_batch(info: DetectorInfo, options: BuildOptions) -> int:
    """The detector's max_batch_size: a static-batch export limits what a platform backend can take."""
    if info.static_batch is None or options.target == "embedded":
        return options.max_batch  # the embedded runner cuts and pads batches to the static size
    if info.static_batch == 1:
        return 1
    raise ConfigError(
        f"the ONNX has a fixed batch of {info.static_batch}, which Triton's {options.target} backend can only "
        "run with exactly that many images; re-export with dynamic=True (or batch=1), or use --target embedded"
    )


def render_models(
    info: DetectorInfo,
    options: BuildOptions,
    extra_parameters: dict[str, dict[str, str]] | None = None,
    detector_overrides: dict[str, Any] | None = None,
) -> dict[str, RenderedModel]:
    """Render, parse and cross-check the four configs; returns them keyed by model name.

    ``info`` describes the *served* detector graph (after precision and the normalisation prefix).
    ``detector_overrides`` replaces detector template values, e.g. bindings read from a TensorRT engine.
    """
    env = _environment()
    names = options.model_names
    height, width = info.image_size
    batching = {
        "instance_kind": "KIND_CPU",
        "queue_delay_us": options.queue_delay_us,
        "queue_timeout_us": options.queue_timeout_us,
        "max_queue_size": options.max_queue_size,
    }
    extra = extra_parameters or {}
    limits = options.limits
    detector = {
        "name": names["detector"],
        "max_batch_size": detector_max_batch(info, options),
        "input_name": info.input.name,
        "input_dtype": info.input.triton_dtype,
        "input_dims": _dims(info.input.shape[1:]),
        "output_name": info.output.name,
        "output_dtype": info.output.triton_dtype,
        "output_dims": _dims(info.output.shape[1:]),
        "instances": options.detector_instances,
        "cuda_graphs": False,
        "warmup_file": "",
        "parameters": extra.get("detector", {}),
        **batching,
    }
    if options.target == "tensorrt":
        detector["instance_kind"] = "KIND_GPU"
    detector.update(detector_overrides or {})
    contexts: dict[str, tuple[str, dict[str, Any]]] = {
        "preprocess": ("preprocess.pbtxt.j2", {
            "name": names["preprocess"],
            "max_batch_size": options.max_batch,
            "image_dtype": detector["input_dtype"],
            "image_dims": [height, width, 3] if options.normalise_in == "graph" else [3, height, width],
            "instances": options.preprocess_instances,
            "parameters": {
                "input_height": str(height),
                "input_width": str(width),
                "max_image_bytes": str(limits.max_bytes),
                "max_image_pixels": str(limits.max_pixels),
                "max_image_side": str(limits.max_side),
                "reduced_decode": "true" if options.reduced_decode else "false",
                "output_dtype": "uint8" if options.normalise_in == "graph" else info.input.numpy_dtype,
                **extra.get("preprocess", {}),
            },
            **batching,
        }),
        "detector": (_DETECTOR_TEMPLATES[options.target], detector),
        "nms": ("nms.pbtxt.j2", {
            "name": names["nms"],
            "max_batch_size": options.max_batch,
            "raw_name": detector["output_name"],
            "raw_dtype": detector["output_dtype"],
            "raw_dims": detector["output_dims"],
            "max_detections": options.max_detections,
            "instances": options.nms_instances,
            "parameters": {
                "layout": info.layout,
                "conf_threshold": repr(options.conf_threshold),
                "iou_threshold": repr(options.iou_threshold),
                "max_detections": str(options.max_detections),
                **extra.get("nms", {}),
            },
            **batching,
        }),
    }
    rendered: dict[str, RenderedModel] = {}
    for step, (template, context) in contexts.items():
        text = env.get_template(template).render(**context)
        rendered[step] = RenderedModel(context["name"], text, parse_config(context["name"], text))

    ensemble_text = env.get_template("ensemble.pbtxt.j2").render(
        name=options.name,
        max_batch_size=min(r.config.max_batch_size for r in rendered.values()),
        max_detections=options.max_detections,
        preprocess=names["preprocess"],
        detector=names["detector"],
        nms=names["nms"],
        detector_input=detector["input_name"],
        detector_output=detector["output_name"],
        parameters={contract.CLASS_NAMES_PARAMETER: json.dumps(list(info.class_names)), **extra.get("ensemble", {})},
    )
    ensemble = RenderedModel(options.name, ensemble_text, parse_config(options.name, ensemble_text))
    models = {r.name: r for r in (ensemble, *rendered.values())}
    check_ensemble_wiring(ensemble.config, {r.name: r.config for r in rendered.values()})
    return models


def _dims_agree(a: list[int], b: list[int]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def check_ensemble_wiring(ensemble: mc.ModelConfig, composing: dict[str, mc.ModelConfig]) -> None:
    """Check what Triton would only find at load time: names, dtypes, dims and batch sizes agree."""
    # ensemble tensor name -> (dtype, dims, producer)
    tensors: dict[str, tuple[int, list[int], str]] = {
        t.name: (t.data_type, list(t.dims), "ensemble input") for t in ensemble.input
    }
    for step in ensemble.ensemble_scheduling.step:
        model = composing.get(step.model_name)
        if model is None:
            raise ConfigError(f"ensemble '{ensemble.name}' uses unknown model '{step.model_name}'")
        if model.max_batch_size < ensemble.max_batch_size:
            raise ConfigError(
                f"ensemble max_batch_size {ensemble.max_batch_size} exceeds '{model.name}' max_batch_size "
                f"{model.max_batch_size}"
            )
        inputs = {t.name: t for t in model.input}
        outputs = {t.name: t for t in model.output}
        if set(step.input_map) != set(inputs):
            raise ConfigError(
                f"step '{model.name}' maps inputs {sorted(step.input_map)} but the model has {sorted(inputs)}"
            )
        for key, tensor_name in step.input_map.items():
            if tensor_name not in tensors:
                raise ConfigError(f"step '{model.name}' input '{key}' reads '{tensor_name}', which nothing produces")
            dtype, dims, producer = tensors[tensor_name]
            wanted = inputs[key]
            if dtype != wanted.data_type or not _dims_agree(dims, list(wanted.dims)):
                raise ConfigError(
                    f"'{tensor_name}' from {producer} is {mc.DataType.Name(dtype)} {dims} but '{model.name}' "
                    f"input '{key}' expects {mc.DataType.Name(wanted.data_type)} {list(wanted.dims)}"
                )
        for key, tensor_name in step.output_map.items():
            if key not in outputs:
                raise ConfigError(f"step '{model.name}' maps output '{key}', which the model does not have")
            out = outputs[key]
            tensors[tensor_name] = (out.data_type, list(out.dims), f"'{model.name}' output '{key}'")
    for out in ensemble.output:
        if out.name not in tensors:
            raise ConfigError(f"ensemble output '{out.name}' is not produced by any step")
        dtype, dims, producer = tensors[out.name]
        if dtype != out.data_type or not _dims_agree(dims, list(out.dims)):
            raise ConfigError(
                f"ensemble output '{out.name}' is declared {mc.DataType.Name(out.data_type)} {list(out.dims)} "
                f"but {producer} is {mc.DataType.Name(dtype)} {dims}"
            )
