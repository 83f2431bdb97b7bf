"""A static-batch embedded detector prefers batches of its export's size; everything else takes the largest."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, Target
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata


@pytest.mark.parametrize(("batch", "target", "preferred"), [
    (1, "embedded", [1]),  # a batch of 4 would run 4 times on one instance while the others idle
    ("batch", "embedded", []),
    (1, "onnxruntime", []),  # Triton's ONNX Runtime backend serves a static export without batching
])
def test_preferred_batch_size(tmp_path: Path, batch: int | str, target: Target, preferred: list[int]) -> None:
    onnx_path = save(make_detector("v8", num_classes=3, batch=batch,
                                   metadata=ultralytics_metadata(names=("a", "b", "c")), seed=3),
                     tmp_path / "m.onnx")
    repo = build_repository(onnx_path, tmp_path / "repo", BuildOptions(target=target, max_batch=4, service_ms=50.0))
    config = text_format.Parse((repo.output / "yolo_detector" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert list(config.dynamic_batching.preferred_batch_size) == preferred
    for step in ("yolo_preprocess", "yolo_nms"):
        other = text_format.Parse((repo.output / step / "config.pbtxt").read_text(), mc.ModelConfig())
        assert list(other.dynamic_batching.preferred_batch_size) == []
