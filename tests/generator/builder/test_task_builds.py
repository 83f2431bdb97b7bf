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

TASKS = {"pose": "pose", "obb": "obb", "seg": "segment"}


@pytest.mark.parametrize(("head", "target"), [("pose", "onnxruntime"), ("obb", "onnxruntime"),
                                              ("seg", "onnxruntime"), ("pose", "tensorrt"), ("obb", "tensorrt")])
def test_a_task_head_builds_with_its_outputs_on_the_ensemble(head: str, target: Target, tmp_path: Path) -> None:
    options = BuildOptions(name="m", target=target, service_ms=50.0,
                           tensorrt=TensorRTOptions(defer_plan=target == "tensorrt"))
    build_repository(fixtures.write(f"{head}-static", tmp_path), tmp_path / "repo", options)
    ensemble = text_format.Parse((tmp_path / "repo" / "m" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [o.name for o in ensemble.output] == list(TASK_OUTPUTS[TASKS[head]])
    assert {p: v.string_value for p, v in ensemble.parameters.items()}["task"] == TASKS[head]
