"""FP16 and INT8 builds of the demo detector: the gate, serving on the embedded Triton, and ``check``.

These build real precision graphs (INT8 calibrates through the serving preprocess), so they are the
slowest tests of the suite; they run on the same machine a user has, no GPU.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, GateOptions, Precision, PrecisionOptions
from generator.cli import main
from generator.evaluation.reference import ReferencePipeline
from generator.model.onnx_inspect import inspect_onnx
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.synthetic import encode, make_scene
from tests.integration.helpers import assert_matches_reference, infer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRECISIONS: tuple[Precision, ...] = ("fp16", "int8")


@pytest.fixture(scope="module")
def precision_repositories(tmp_path_factory, demo_onnx) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("precision")
    repositories: dict[str, Path] = {}
    for precision in PRECISIONS:
        repositories[precision] = root / precision
        build_repository(
            demo_onnx,
            repositories[precision],
            BuildOptions(name=f"yolo_{precision}", precision=precision, max_batch=4,
                         calibration=PrecisionOptions(calib_count=64),
                         # Forced: these test the FP16/INT8 graphs served, which this CPU may run slower than FP32.
                         gate=GateOptions(count=48, speed_gate="record")),
        )
    return repositories


@pytest.fixture(scope="module")
def precision_server(tmp_path_factory, precision_repositories):
    log = tmp_path_factory.mktemp("precision_log") / "tritonserver.log"
    fp16, int8 = precision_repositories["fp16"], precision_repositories["int8"]
    server = EmbeddedServer(fp16, free_port(), free_port(), free_port(), log_file=log,
                            extra_args=(f"--model-repository={int8}",))
    with server:
        yield server


@pytest.mark.parametrize("precision", PRECISIONS)
def test_build_passes_the_gate_at_the_documented_threshold(precision_repositories, precision) -> None:
    repository = precision_repositories[precision]
    report = json.loads((repository / "validation.json").read_text())
    manifest = json.loads((repository / "manifest.json").read_text())
    assert report["passed"] is True
    assert report["max_drop_points"] == {"fp16": 0.5, "int8": 1.5}[precision]
    assert report["label_source"] == "ground truth"
    assert report["reference"]["map50"] > 0.9, "the FP32 demo must detect the control scenes (measured 0.97)"
    assert manifest["precision"] == precision
    assert manifest["validation"] == "accuracy gate passed"
    speed = json.loads(manifest["precision_facts"]["speed_gate"])
    assert speed["mode"] == "record" and speed["kept"] == precision and speed["batch_sizes"] == [1, 4]
    assert speed["rounds"] == 7 and speed["fp32_ms"]["4"] > 0 and speed["candidate_ms"]["4"] > 0
    if precision == "int8":
        assert manifest["calibration"]["method"] == "minmax"
        assert len(manifest["calibration"]["digest"]) == 64


@pytest.mark.parametrize("precision", PRECISIONS)
def test_served_graph_is_what_tensorrt_parses(precision_repositories, precision) -> None:
    import onnx

    from generator.builder.stages.precision.tensorrt_compat import find_incompatibilities

    repository = precision_repositories[precision]
    model = onnx.load(str(repository / f"yolo_{precision}_detector" / "1" / "model.onnx"))
    assert find_incompatibilities(model) == []
    if precision == "int8":
        ops = {node.op_type for node in model.graph.node}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        facts = json.loads((repository / "manifest.json").read_text())["precision_facts"]
        assert facts["int8_tool"] == "ort" and facts["int8_float"] == "fp16"
        assert facts["quantization"].endswith(")") and "INT32" not in facts["quantization"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_ensemble_serves_what_the_gate_measured(precision_server, precision_repositories, demo_onnx,
                                                          precision) -> None:
    repository = precision_repositories[precision]
    served_graph = repository / f"yolo_{precision}_detector" / "1" / "model.onnx"
    served_layout = json.loads((repository / "manifest.json").read_text())["detector"]["served_layout"]
    assert served_layout == "v8_reduced"
    reference = ReferencePipeline(served_graph, info=inspect_onnx(demo_onnx), layout=served_layout)
    images = [encode(make_scene(np.random.default_rng(40 + i), 1280, 720).image) for i in range(3)]
    served = infer(precision_server, f"yolo_{precision}", images)
    expected_all = reference.detect_many(images)
    assert sum(len(expected.scores) for expected in expected_all) > 0
    for index, expected in enumerate(expected_all):
        assert_matches_reference(served, expected, index)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gate_fails_when_threshold_is_below_the_measured_drop(precision_repositories, tmp_path, precision,
                                                              capsys) -> None:
    repository = tmp_path / precision
    shutil.copytree(precision_repositories[precision], repository)
    measured = json.loads((repository / "validation.json").read_text())["drop_points"]
    code = main(["validate", "--model-repository", str(repository), "--count", "48",
                 "--max-map-drop", f"{measured - 0.01:.4f}"])
    assert code == 1
    assert "accuracy gate FAILED" in capsys.readouterr().err
    code = main(["validate", "--model-repository", str(repository), "--count", "48",
                 "--max-map-drop", f"{measured + 0.01:.4f}"])
    assert code == 0


def test_check_accepts_the_build_and_detects_a_tampered_model(precision_repositories, tmp_path, capsys) -> None:
    repository = tmp_path / "int8"
    shutil.copytree(precision_repositories["int8"], repository)
    assert main(["check", str(repository)]) == 0
    model = repository / "yolo_int8_detector" / "1" / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\0")
    assert main(["check", str(repository)]) == 1
    assert "yolo_int8_detector/1/model.onnx" in capsys.readouterr().err


def test_failed_gate_writes_nothing(demo_onnx, tmp_path) -> None:
    output = tmp_path / "repo"
    with pytest.raises(Exception, match="accuracy gate FAILED"):
        build_repository(
            demo_onnx, output, BuildOptions(name="yolo", precision="int8", calibration=PrecisionOptions(calib_count=16),
                                            gate=GateOptions(count=16, max_drop_points=-100.0)),
        )
    assert not output.exists()
    assert not list(tmp_path.glob(".repo.*"))
