"""Where NMS runs by default, per target and head: the graph on TensorRT, the Python step on ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, SpecError, TensorRTOptions
from generator.builder.stages.precision.tensorrt_compat import find_incompatibilities
from generator.serving.contract import GRAPH_NMS_LAYOUT
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata

DEFERRED = TensorRTOptions(defer_plan=True)


def build(tmp_path: Path, head: str = "v8", size: tuple[int | str, int | str] = (64, 64),
          **options: Any) -> dict[str, object]:
    extra: dict[str, Any] = {"end2end": "True"} if head == "end2end" else {}
    metadata = ultralytics_metadata(names=("a", "b", "c"), **extra)
    model = make_detector(head, num_classes=3, size=size, metadata=metadata, seed=2)
    onnx_path = save(model, tmp_path / f"{head}.onnx")
    repo = build_repository(onnx_path, tmp_path / "repo", BuildOptions(service_ms=50.0, **options))
    detector = json.loads((repo.output / "manifest.json").read_text())["detector"]
    nms = text_format.Parse((repo.output / "yolo_nms" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert (nms.parameters["layout"].string_value == GRAPH_NMS_LAYOUT) == detector["nms_in_graph"]
    return dict(detector)


@pytest.mark.parametrize("head", ["v8", "v5"])
def test_tensorrt_runs_nms_in_the_graph_by_default(tmp_path: Path, head: str) -> None:
    detector = build(tmp_path, head, target="tensorrt", tensorrt=DEFERRED)
    assert detector["nms_in_graph"] is True and "INMSLayer" in str(detector["nms_placement"])


@pytest.mark.parametrize(("options", "reason"), [
    ({}, "ONNX Runtime on the CPU"),
    ({"target": "onnxruntime"}, "ONNX Runtime on the CPU"),
    ({"target": "onnxruntime", "device": "gpu"}, "CUDA provider"),
    ({"device": "gpu"}, "CUDA provider"),
    ({"target": "tensorrt", "tensorrt": DEFERRED, "python_nms": True}, "--python-nms"),
    ({"target": "tensorrt", "tensorrt": DEFERRED, "max_detections": 5000}, "TopK limit"),
])
def test_elsewhere_the_python_step_keeps_it_and_the_manifest_says_why(tmp_path: Path, options: dict[str, Any],
                                                                      reason: str) -> None:
    detector = build(tmp_path, **options)
    assert detector["nms_in_graph"] is False and reason in str(detector["nms_placement"])


def test_an_export_with_open_spatial_axes_gets_a_constant_top_k_for_tensorrt(tmp_path: Path) -> None:
    detector = build(tmp_path, size=("height", "width"), target="tensorrt", tensorrt=DEFERRED, image_size=(64, 64))
    assert detector["nms_in_graph"] is True
    served = onnx.load(str(tmp_path / "repo" / "yolo_detector" / "1" / "model.onnx"))
    assert find_incompatibilities(served) == []  # TopK's K is an initializer: the parser takes it
    images = np.random.default_rng(0).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    (rows,) = ort.InferenceSession(served.SerializeToString()).run(None, {served.graph.input[0].name: images})
    assert rows.shape == (2, 100, 6)


def test_an_end_to_end_head_needs_none(tmp_path: Path) -> None:
    detector = build(tmp_path, "end2end", target="tensorrt", tensorrt=DEFERRED)
    assert detector["nms_in_graph"] is False and "needs no NMS" in str(detector["nms_placement"])


def test_nms_in_graph_puts_it_there_on_any_target_and_contradicting_flags_are_refused(tmp_path: Path) -> None:
    assert build(tmp_path, nms_in_graph=True)["nms_placement"] == "--nms-in-graph"
    with pytest.raises(SpecError, match="contradict"):
        BuildOptions(nms_in_graph=True, python_nms=True)
