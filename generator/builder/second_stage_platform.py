"""A two-stage build's classifier step on Triton's own backends (``--target onnxruntime`` / ``tensorrt``).

The embedded target runs the classifier in a Python-backend step; the NGC containers serve it as a platform model
like the detector: the classifier's served graph (normalisation prefix, after --precision) wrapped by
``crop_classifier`` so it takes the crop step's tensors as they are and returns the per-box top-k, batched by
Triton. For TensorRT the plan comes from a build spec next to it, built here or, with ``--defer-plan``, on the
serving GPU host (``python -m generator plan``), as the detector's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import onnx

from generator.builder.spec.options import BuildOptions, SpecError
from generator.builder.stages.config.model_io import ModelIO, onnxruntime_io
from generator.builder.stages.graph.crop_classifier import wrap_crop_classifier
from generator.serving.cuda_provider import SETTINGS as CUDA_SETTINGS

if TYPE_CHECKING:
    from generator.builder.stages.tensorrt.builder import BuildSpec
    from generator.model.onnx_inspect import DetectorInfo

PLATFORMS = {"onnxruntime": "onnxruntime_onnx", "tensorrt": "tensorrt_plan"}
ONNX_FILE = "model.onnx"


@dataclass(frozen=True)
class PlatformClassifier:
    """The classifier step's files, what its backend will check its config against, and its pending plan."""

    files: dict[str, bytes]
    backend_io: ModelIO
    spec: BuildSpec | None = None  # TensorRT: the plan's build spec
    pending: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassifierStep:
    """What the platform step is made of: its model name, the classifier and the per-image crop tensors' sizes."""

    name: str
    info: DetectorInfo
    max_boxes: int
    size: int
    top_k: int


def require_dynamic_batch(info: DetectorInfo) -> None:
    """The platform step runs every crop of the batch in one run: a static-batch export cannot take them."""
    if info.static_batch is not None:
        raise SpecError(f"--classifier {info.path.name} has a fixed batch of {info.static_batch}; the "
                        "platform classifier step runs all crops of a batch at once: re-export it with "
                        "dynamic=True (or build with --target embedded)")


def platform_classifier(stage: ClassifierStep, options: BuildOptions, served: onnx.ModelProto,
                        folder: str) -> PlatformClassifier:
    """The files of the classifier step for ``options.target`` (``served``: its graph with the prefix)."""
    require_dynamic_batch(stage.info)
    name = stage.name
    # ONNX Runtime runs the real crops only; a TensorRT plan keeps fixed shapes (every row, the padding zeroed).
    wrapped = wrap_crop_classifier(served, stage.max_boxes, stage.size, stage.top_k,
                                   real_only=options.target == "onnxruntime")
    data = wrapped.SerializeToString()
    files = {f"{name}/{folder}/{ONNX_FILE}": data}
    if options.target == "onnxruntime":
        return PlatformClassifier(files, onnxruntime_io(data))
    from generator.builder.stages.tensorrt.classifier_plan import classifier_plan

    plan = classifier_plan(wrapped, stage.max_boxes, stage.size, stage.top_k, options)
    files.update({f"{name}/{folder}/{path}": content for path, content in plan.files.items()})
    pending = () if plan.built else (f"{name}/{folder}/{plan.spec.plan_path}",)
    return PlatformClassifier(files, plan.engine, plan.spec, pending)


def platform_context(options: BuildOptions) -> dict[str, Any]:
    """Template values of a platform classifier step: platform, instance kind, the detector's accelerators."""
    gpu = options.detector_device == "gpu"
    parameters: dict[str, str] = {}
    accelerators: list[dict[str, Any]] = []
    if options.target == "onnxruntime":
        if options.detector_threads > 0:
            parameters["intra_op_thread_count"] = str(options.detector_threads)
        if gpu:
            accelerators.append({"name": "cuda", "parameters": CUDA_SETTINGS.parameters()})
            parameters.update(CUDA_SETTINGS.legacy_parameters())
    return {"platform": PLATFORMS[options.target], "instance_kind": "KIND_GPU" if gpu else "KIND_CPU",
            "gpu_accelerators": accelerators, "parameters": parameters,
            "default_model_filename": "model.plan" if options.target == "tensorrt" else ONNX_FILE}
