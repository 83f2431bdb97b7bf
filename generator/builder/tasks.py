"""Which Ultralytics tasks a build serves."""

from __future__ import annotations

from generator.builder.spec.options import BuildOptions, SpecError
from generator.errors import ModelInspectionError
from generator.model.onnx_inspect import DetectorInfo

# Tasks whose post-processing step exists; the others are recognised at inspection and refused here, by name.
SERVED_TASKS = ("detect", "pose", "obb", "segment", "classify")


def require_served_task(info: DetectorInfo, options: BuildOptions | None = None) -> None:
    """Refuse an export whose task the ensemble does not serve (naming the task and its head), or a build option
    its post-processing cannot honour."""
    if info.task not in SERVED_TASKS:
        raise ModelInspectionError(
            f"{info.path.name} is an Ultralytics '{info.task}' export (head '{info.metadata.get('head', '?')}', "
            f"output {list(info.output.shape)}); the ensemble serves the tasks {', '.join(SERVED_TASKS)}")
    if info.task == "detect":
        return
    options = options or BuildOptions()
    if options.nms_in_graph:
        raise SpecError(f"--nms-in-graph builds ONNX NonMaxSuppression for detection heads; the {info.task} "
                        "head's NMS runs in the Python step (drop --nms-in-graph)")
    if info.task == "segment" and options.target == "tensorrt":
        raise SpecError("--target tensorrt binds one detector output; a segmentation export's second output (the "
                        "mask prototypes) is served with --target embedded or onnxruntime")
    if info.task == "classify" and options.preprocess_device == "gpu":
        raise SpecError("--preprocess-device gpu letterboxes; a classification export's centre crop runs on the CPU "
                        "(drop --preprocess-device gpu)")
    if options.precision != "fp32" and options.gate.enabled and options.gate.labels is not None:
        raise SpecError(f"--validate-labels: the accuracy gate of the {info.task} export compares it with its FP32 "
                        "build's own outputs on --validate-images (pseudo-labels); drop --validate-labels")
