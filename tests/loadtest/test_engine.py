"""``loadtest engine``: the served graph outside Triton (here on the CPU provider; the GPU ways run on the H200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from loadtest.cli import main
from loadtest.engine import detector_config


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("engine") / "repo"
    build_repository(DEMO_ONNX, out, BuildOptions(max_batch=4, service_ms=50.0))
    return out


def test_the_served_graph_alone_at_each_batch_size(repository: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "engine.json"
    assert main(["engine", "--repository", str(repository), "--batches", "1,2", "--seconds", "0.2", "--here",
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["provider"] == "CPUExecutionProvider" and set(printed["batches"]) == {"1", "2"}
    for row in printed["batches"].values():
        assert set(row) == {"engine_host", "runner_host"}  # the GPU ways need a GPU repository
        assert all(way["images_per_s"] > 0 and way["runs"] >= 3 for way in row.values())


def test_what_is_not_an_embedded_detector_is_named(repository: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path, parameters, dims = detector_config(repository, "yolo")
    assert path.name == "model.onnx" and parameters["onnx_file"] == "model.onnx" and dims == [640, 640, 3]
    assert main(["engine", "--repository", str(tmp_path), "--here"]) == 1
    assert "no detector config" in capsys.readouterr().err
    assert main(["engine", "--repository", str(repository), "--batches", "0", "--here"]) == 1
    assert "positive integers" in capsys.readouterr().err
