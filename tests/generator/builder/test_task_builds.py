"""Every served task head builds for the targets the README's task table names, its configs proto-checked and
wired (render_models and check_load_rules run in every build); served on the embedded Triton:
tests/integration/test_task_heads.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, Target, TensorRTOptions
from generator.serving.contract import TASK_OUTPUTS
from tests.fixtures import ultralytics as fixtures

TASKS = {"pose": "pose", "obb": "obb", "seg": "segment", "classify": "classify"}


@pytest.mark.parametrize(("head", "target"), [("pose", "onnxruntime"), ("obb", "onnxruntime"),
                                              ("seg", "onnxruntime"), ("pose", "tensorrt"), ("obb", "tensorrt"),
                                              ("classify", "onnxruntime"), ("classify", "tensorrt")])
def test_a_task_head_builds_with_its_outputs_on_the_ensemble(head: str, target: Target, tmp_path: Path) -> None:
    options = BuildOptions(name="m", target=target, service_ms=50.0,
                           tensorrt=TensorRTOptions(defer_plan=target == "tensorrt"))
    build_repository(fixtures.write(f"{head}-static", tmp_path), tmp_path / "repo", options)
    ensemble = text_format.Parse((tmp_path / "repo" / "m" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [o.name for o in ensemble.output] == list(TASK_OUTPUTS[TASKS[head]])
    assert {p: v.string_value for p, v in ensemble.parameters.items()}["task"] == TASKS[head]


def test_a_classifier_crops_and_returns_its_top_k(tmp_path: Path) -> None:
    """The preprocess step crops at full decode; the last step and the ensemble carry only the top-k outputs, k at
    most the class count."""
    options = BuildOptions(name="m", service_ms=50.0, top_k=3)
    build_repository(fixtures.write("classify-static", tmp_path), tmp_path / "repo", options)

    def config(model: str) -> mc.ModelConfig:
        return text_format.Parse((tmp_path / "repo" / model / "config.pbtxt").read_text(), mc.ModelConfig())

    preprocess = {p: v.string_value for p, v in config("m_preprocess").parameters.items()}
    assert (preprocess["resize"], preprocess["reduced_decode"]) == ("center_crop", "false")
    for model in ("m", "m_nms"):
        assert [(o.name, list(o.dims)) for o in config(model).output] == [("top_classes", [3]), ("top_scores", [3])]
    assert {p: v.string_value for p, v in config("m_nms").parameters.items()}["top_k"] == "3"
