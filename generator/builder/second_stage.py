"""A two-stage build (``build --classifier``): after NMS, the crop of every kept box classified by a second export.

Two more steps join the ensemble: ``NAME_crop`` cuts the first ``--classify-boxes`` boxes out of the
full-resolution source image as Ultralytics' ``save_one_box`` does and gives each the classifier's own resize and
centre crop (generator/serving/two_stage.py); ``NAME_classifier`` runs the classifier's served graph (its
normalisation prefix, uint8 BGR in) on ONNX Runtime over the crops of every queued image, with its own instances
and dynamic batching, and returns each crop's top-k (contract.BOX_CLASSES, BOX_SCORES). What the classifier's
Ultralytics metadata says (task classify, imgsz, names) decides its input size and the names the ensemble carries.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx

from generator.builder.second_stage_platform import PlatformClassifier, platform_context
from generator.builder.spec.options import BuildOptions, SpecError
from generator.builder.stages.config.render import SecondStageRender
from generator.builder.stages.config.task_io import top_k
from generator.builder.stages.graph.prefix import add_normalisation_prefix
from generator.model.onnx_inspect import DetectorInfo, inspect_onnx
from generator.serving import contract

CROP_SOURCE = "crop_boxes.py"
CLASSIFIER_SOURCE = "classifier.py"


@dataclass(frozen=True)
class SecondStage:
    """The classifier of a two-stage build and what its steps are rendered from."""

    info: DetectorInfo
    size: int  # the classifier's square input side
    top_k: int
    max_boxes: int  # --classify-boxes, at most --max-detections
    served: onnx.ModelProto | None = None  # the graph served (after --precision); None: the export's, in FP32

    def names(self, options: BuildOptions) -> dict[str, str]:
        return {step: contract.step_model_name(options.name, step) for step in contract.SECOND_STAGE_STEPS}


def inspect_second_stage(detector: DetectorInfo, options: BuildOptions) -> SecondStage | None:
    """The classifier of ``--classifier``, checked: a classify export behind a detection export. None: no
    second stage."""
    if options.classifier is None:
        return None
    if detector.task != "detect":
        raise SpecError(f"--classifier classifies the boxes of a detection export; {detector.path.name} is an "
                        f"Ultralytics '{detector.task}' export")
    info = inspect_onnx(options.classifier)
    task = info.metadata.get("task")
    if task != "classify":
        said = f"says task '{task}'" if task else "names no task"
        raise SpecError(f"--classifier {options.classifier.name}: its Ultralytics metadata {said}; the second "
                        "stage needs a classify export (yolo export of a -cls model)")
    height, width = info.image_size
    if height != width:
        raise SpecError(f"--classifier {options.classifier.name} takes {width}x{height} images; an Ultralytics "
                        "classifier's centre crop is square")
    return SecondStage(info, height, top_k(info, options.top_k), options.second_stage_boxes)


def served_classifier(stage: SecondStage) -> onnx.ModelProto:
    """The classifier's served graph: as lowered by --precision, else the export's with its normalisation prefix."""
    return stage.served or add_normalisation_prefix(onnx.load(str(stage.info.path)))


def second_stage_files(stage: SecondStage, options: BuildOptions, folder: str,
                       python_step_files: Callable[..., dict[str, bytes]],
                       platform: PlatformClassifier | None = None) -> dict[str, bytes]:
    """The crop step's Python sources (``python_step_files``: the pipeline's) and the classifier step's files: its
    served graph and Python source, or ``platform``'s (``--target onnxruntime``/``tensorrt``)."""
    names = stage.names(options)
    files = python_step_files(names["crop"], CROP_SOURCE, folder=folder)
    if platform is not None:
        return {**files, **platform.files}
    files[f"{names['classifier']}/{folder}/model.onnx"] = served_classifier(stage).SerializeToString()
    files.update(python_step_files(names["classifier"], CLASSIFIER_SOURCE, folder=folder))
    return files


def classifier_options(options: BuildOptions) -> BuildOptions:
    """The build options the classifier is lowered and gated with: the build's, but its gate compares it with its
    own FP32 outputs (pseudo-labels, as a classify export's gate does); --validate-labels are the detector's."""
    return dataclasses.replace(options, gate=dataclasses.replace(options.gate, labels=None))


def prefixed(files: dict[str, bytes], facts: dict[str, str]) -> tuple[dict[str, bytes], dict[str, str]]:
    """The classifier's gate reports and precision facts, named apart from the detector's."""
    return ({f"classifier_{name}": data for name, data in files.items()},
            {f"classifier_{key}": value for key, value in facts.items()})


def second_stage_contexts(stage: SecondStage, options: BuildOptions, batching: dict[str, Any],
                          image_parameters: dict[str, str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Template and values of the crop and classifier configs (``image_parameters``: the preprocess's header
    limits, which the crop step's decode keeps)."""
    names = stage.names(options)
    shared = {**batching, "max_batch_size": options.max_batch, "max_boxes": stage.max_boxes, "size": stage.size}
    crop = {**shared, "name": names["crop"], "max_detections": options.max_detections,
            "instances": options.preprocess_instances,
            "parameters": {**image_parameters, "classifier_size": str(stage.size),
                           "classify_boxes": str(stage.max_boxes)}}
    classifier = {**shared, "name": names["classifier"], "top_k": stage.top_k, "platform": None,
                  "instances": options.detector_instances,
                  "parameters": {"onnx_file": "model.onnx", "top_k": str(stage.top_k),
                                 "intra_op_threads": str(options.detector_thread_setting)}}
    if options.target != "embedded":  # Triton's own backend (generator.builder.second_stage_platform)
        classifier.update(platform_context(options))
    return {"crop": ("crop.pbtxt.j2", crop), "classifier": ("classifier.pbtxt.j2", classifier)}


def second_stage_render(stage: SecondStage, options: BuildOptions) -> SecondStageRender:
    """What render_models adds: both steps' configs, the ensemble's two steps and outputs, and the ensemble
    parameter naming the classifier's classes."""
    names = stage.names(options)
    ensemble = {"crop": names["crop"], "classifier": names["classifier"], "max_boxes": stage.max_boxes,
                "top_k": stage.top_k,
                "parameters": {contract.CLASSIFIER_NAMES_PARAMETER: json.dumps(list(stage.info.class_names))}}
    return SecondStageRender(functools.partial(second_stage_contexts, stage, options), ensemble)
