"""``validate`` on a built repository reads the served head layout from the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, GateOptions
from generator.cli import main
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata


def test_validate_measures_the_reduced_served_graph(tmp_path: Path, capsys) -> None:
    names = ("a", "b", "c")
    onnx_path = save(make_detector("v8", num_classes=3, metadata=ultralytics_metadata(names=names), seed=3),
                     tmp_path / "tiny.onnx")
    repository = tmp_path / "repo"
    build_repository(onnx_path, repository, BuildOptions())
    assert json.loads((repository / "manifest.json").read_text())["detector"]["served_layout"] == "v8_reduced"
    assert main(["validate", "--model-repository", str(repository), "--count", "4"]) == 0
    report = json.loads((repository / "validation.json").read_text())
    assert report["passed"] and report["drop_points"] == 0.0
    assert report["raw_max_abs_diff"] == 0.0 and report["score_max_abs_diff"] == 0.0
    assert "accuracy gate passed" in capsys.readouterr().out


def test_validate_layerwise_writes_the_per_layer_report(tmp_path: Path, capsys) -> None:
    onnx_path = save(make_detector("v8", num_classes=3, metadata=ultralytics_metadata(names=("a", "b", "c")),
                                   seed=5), tmp_path / "tiny.onnx")
    repository = tmp_path / "repo"
    build_repository(onnx_path, repository, BuildOptions(precision="fp16", gate=GateOptions(
        enabled=False, speed_gate="record")))
    assert main(["validate", "--model-repository", str(repository), "--count", "4", "--layerwise",
                 "--layerwise-count", "2"]) == 0
    out = capsys.readouterr().out
    assert "# Layer-wise error: FP16 (CPUExecutionProvider) against FP32 (CPU)" in out
    assert "layer-wise: no fp16 layer adds more than" in out
    report = json.loads((repository / "layerwise.json").read_text())
    assert report["images"] == 2 and report["compared"] == len(report["layers"]) > 0
    assert all(layer["precision"] in ("fp16", "fp32") for layer in report["layers"])
    assert "| node | op | precision |" in (repository / "layerwise.md").read_text()
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        assert main(["validate", "--model-repository", str(repository), "--count", "4", "--layerwise",
                     "--provider", "cuda"]) == 1
        error = capsys.readouterr().err.strip()
        assert "\n" not in error and "--provider cuda: this ONNX Runtime has no CUDAExecutionProvider" in error
