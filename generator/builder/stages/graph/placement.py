"""Where class-aware NMS runs by default: in the detector graph or in the Python nms step, per target and head.

The graph's NMS (``nms.py``) selects exactly what the Python step selects; what differs is its cost, and whether
the target can load it:

- TensorRT (``--target tensorrt``): in the graph. The parser turns ONNX NonMaxSuppression into an INMSLayer that
  runs on the GPU, beside the detector, so the Python step only maps the few kept rows back instead of decoding
  and suppressing every candidate on the host (issue 28: at 80 classes the Python step bounded the GPU pipeline).
  It needs a v8 or v5 head, opset 13, at most ``NMS_IN_GRAPH_MAX_DETECTIONS`` boxes (TopK's limit) and a static
  anchor count: onnx-tensorrt takes TopK's K only as an initializer (``docs/operators.md``), and K is the
  anchor count when fewer anchors than ``--max-detections`` could come out; an export with open spatial axes
  leaves it to a Shape.
- ONNX Runtime on the CPU (``embedded``, ``onnxruntime``): in the Python step. The graph's per-class score rows
  ([N, classes, anchors]) cost more than the whole Python step: yolov8n at 80 classes 2.9 ms per image at batch 1
  and 8-12 ms per image at batch 32, against 0.1-2 ms (docs/PERFORMANCE.md, issue 27).
- ONNX Runtime's CUDA provider (``--device gpu``): in the Python step. Its NonMaxSuppression kernel took the demo
  detector's step from 1,244 to 680 images/s at batch 32 on the H200 (docs/results/gpu/README.md).
- End-to-end heads (YOLOv10, YOLO26): NMS-free, nothing to place.

``--nms-in-graph`` puts it in the graph on any target; ``--python-nms`` keeps it in the Python step on TensorRT.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.builder.spec.options import NMS_IN_GRAPH_MAX_DETECTIONS, BuildOptions
from generator.builder.stages.graph.nms import MIN_OPSET
from generator.model.onnx_inspect import DetectorInfo

GRAPH_LAYOUTS = ("v8", "v8_reduced", "v5")


@dataclass(frozen=True)
class NmsPlacement:
    in_graph: bool
    reason: str

    def record(self) -> dict[str, object]:
        return {"in_graph": self.in_graph, "reason": self.reason}


def _static_anchors(info: DetectorInfo) -> bool:
    shape = info.output.shape
    anchors = shape[2] if info.layout in ("v8", "v8_reduced") else shape[1]
    return isinstance(anchors, int)


def _tensorrt_placement(info: DetectorInfo, options: BuildOptions) -> NmsPlacement:
    if options.python_nms:
        return NmsPlacement(False, "--python-nms")
    if info.opset < MIN_OPSET:
        return NmsPlacement(False, f"opset {info.opset} < {MIN_OPSET}: the graph's NMS needs opset {MIN_OPSET}")
    if options.max_detections > NMS_IN_GRAPH_MAX_DETECTIONS:
        return NmsPlacement(False, f"--max-detections {options.max_detections} is above TensorRT's TopK limit")
    if info.num_classes < 1:
        return NmsPlacement(False, "the class count is unknown")
    if not _static_anchors(info):
        return NmsPlacement(False, "the export leaves the anchor count open: TensorRT's parser takes TopK's K only "
                                   "as an initializer")
    return NmsPlacement(True, "TensorRT: ONNX NonMaxSuppression runs on the GPU (INMSLayer); the Python step only "
                              "maps the kept rows back")


def nms_placement(info: DetectorInfo, options: BuildOptions) -> NmsPlacement:
    """Where this build's NMS runs; ``info`` is the served graph before NMS (its layout and head shape)."""
    if options.nms_in_graph:
        return NmsPlacement(True, "--nms-in-graph")
    if info.layout not in GRAPH_LAYOUTS:
        return NmsPlacement(False, f"the {info.layout} head needs no NMS" if info.layout == "end2end"
                            else f"no graph NMS for the {info.layout} head")
    if options.target == "tensorrt":
        return _tensorrt_placement(info, options)
    if options.detector_device == "gpu":
        return NmsPlacement(False, "ONNX Runtime's CUDA provider: its NonMaxSuppression halved the detector step's "
                                   "throughput (measured); the Python step is faster")
    return NmsPlacement(False, "ONNX Runtime on the CPU: the graph's per-class score rows cost more than the Python "
                               "step (measured)")
