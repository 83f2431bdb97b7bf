"""What a benchmark says it measured: the repository's manifest (a versioned one's stable version), without machine
paths, and whether the files still match it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.builder.versioned import add_version
from loadtest.provenance import repository_record
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(make_detector(metadata=ultralytics_metadata()), tmp_path_factory.mktemp("provenance") / "det.onnx")


def test_a_repository_is_named_by_its_manifest_and_checked_against_it(onnx_path: Path, tmp_path: Path) -> None:
    repo = build_repository(onnx_path, tmp_path / "repo", BuildOptions(max_batch=2, service_ms=10)).output
    record = repository_record(repo)
    assert record is not None and record["matches_manifest"] is True
    assert record["name"] == "yolo" and record["source_onnx"]["name"] == "det.onnx"
    assert str(tmp_path) not in json.dumps(record)
    config = repo / "yolo_nms" / "config.pbtxt"
    config.write_text(config.read_text() + "# edited\n")
    record = repository_record(repo)
    assert record is not None and record["matches_manifest"] is False


def test_a_versioned_repository_is_named_by_its_stable_version(onnx_path: Path, tmp_path: Path) -> None:
    repo = tmp_path / "versions"
    for conf in (0.25, 0.5):
        add_version(onnx_path, repo, BuildOptions(max_batch=2, service_ms=10, conf_threshold=conf))
    record = repository_record(repo)
    assert record is not None and record["name"] == "yolo_v1" and record["matches_manifest"] is True
    assert record["options"]["conf_threshold"] == 0.25
    missing = repository_record(tmp_path / "nothing")
    assert missing is not None and missing["manifest"] is None and "nothing" in missing["why"]
