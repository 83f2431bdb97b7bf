"""``validate`` on a built repository reads the served head layout from the manifest."""

from __future__ import annotations

import json
from pathlib import Path

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
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
