"""Reading the ensemble contract without the model-config API; against the real server: tests/integration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.contract import (
    admin_headers,
    info_from_answers,
    info_from_metadata,
    learn_batch_limit,
    load_model_info,
)
from clients.detection import ModelInfo
from clients.errors import ClientError, InferenceError

NAMES = ("circle", "square")


def metadata(shape=(-1, 1), drop: str | None = None, strings: bool = False) -> dict:
    """Model metadata as tritonclient returns it (gRPC as_json spells dims as strings)."""
    dims = [str(d) if strings else d for d in shape]
    batch = [dims[0]] if shape[0] == -1 else []
    outputs = [("num_detections", "INT32", [1]), ("detection_boxes", "FP32", [100, 4]),
               ("detection_scores", "FP32", [100]), ("detection_classes", "INT32", [100])]
    return {
        "name": "yolo", "platform": "ensemble",
        "inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": dims}],
        "outputs": [{"name": n, "datatype": t, "shape": batch + s} for n, t, s in outputs if n != drop],
    }


@pytest.mark.parametrize("strings", [False, True], ids=["http", "grpc"])
def test_metadata_gives_batching_but_not_its_limit(strings: bool) -> None:
    info = info_from_metadata("yolo", metadata(strings=strings))
    assert info == ModelInfo("yolo", None, ()) and info.batched
    assert not info_from_metadata("yolo", metadata(shape=(1,), strings=strings)).batched


@pytest.mark.parametrize(
    ("meta", "message"),
    [(metadata(drop="detection_scores"), "lacks the detection output"),
     ({**metadata(), "inputs": [{"name": "images", "datatype": "FP32", "shape": [-1, 3, 640, 640]}]},
      "not a detection ensemble"),
     (metadata(shape=(-1, 3)), "expected \\[-1, 1\\] or \\[1\\]")],
)
def test_metadata_of_another_model_is_refused(meta: dict, message: str) -> None:
    with pytest.raises(ClientError, match=message):
        info_from_metadata("yolo", meta)


def test_config_when_read_adds_limit_and_names() -> None:
    config = {"max_batch_size": 8, "parameters": {"class_names": {"string_value": json.dumps(NAMES)}}}
    assert info_from_answers("yolo", metadata(), {"config": config}) == ModelInfo("yolo", 8, NAMES)
    assert info_from_answers("yolo", metadata(), None) == ModelInfo("yolo", None, ())


def test_batch_limit_is_learned_from_tritons_refusal() -> None:
    refusal = InferenceError("[request id: <id_unknown>] inference request batch-size must be <= 8 for 'yolo'")
    unknown = ModelInfo("yolo", None, ())
    assert learn_batch_limit(unknown, refusal) == ModelInfo("yolo", 8, ())
    assert learn_batch_limit(ModelInfo("yolo", 4, ()), refusal) is None  # known limits are not overwritten
    assert learn_batch_limit(unknown, InferenceError("invalid image: truncated JPEG")) is None


def test_admin_headers_per_protocol() -> None:
    assert admin_headers("http", "k" * 16) == {"admin-key": "k" * 16}
    assert admin_headers("grpc", "k" * 16) == {"triton-grpc-protocol-admin-key": "k" * 16}
    assert admin_headers("grpc", None) == {}


def test_shipped_config_file(tmp_path: Path) -> None:
    model = tmp_path / "yolo"
    model.mkdir()
    (model / "config.pbtxt").write_text(
        'name: "yolo"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        f'parameters {{ key: "class_names" value {{ string_value: {json.dumps(json.dumps(NAMES))} }} }}\n'
    )
    assert load_model_info(model) == load_model_info(model / "config.pbtxt") == ModelInfo("yolo", 8, NAMES)


def test_shipped_config_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="cannot read the model config"):
        load_model_info(tmp_path / "missing.pbtxt")
    (tmp_path / "bad.pbtxt").write_text("name: yolo_without_quotes {")
    with pytest.raises(ClientError, match="is not a Triton model config"):
        load_model_info(tmp_path / "bad.pbtxt")
