"""check_repository on a versioned repository: the alias against the index, and the index as it was named before
versions.json (the root manifest.json), which repositories built before the change keep until their next update."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from generator.builder.spec.options import BuildOptions
from generator.builder.versioned import add_version
from generator.operate.rollout import state
from generator.repository.check import check_repository
from generator.repository.versions import INDEX_NAME, LEGACY_INDEX_NAME, read_index
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata


def options(conf: float = 0.25) -> BuildOptions:
    return BuildOptions(name="yolo", max_batch=2, conf_threshold=conf, service_ms=10)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A versioned repository of a small detector (1 stable, 2 a candidate) and the detector."""
    root = tmp_path_factory.mktemp("versions")
    onnx = save(make_detector("v8", metadata=ultralytics_metadata(names=("a", "b")), seed=5), root / "tiny.onnx")
    repo = root / "repo"
    add_version(onnx, repo, options())
    add_version(onnx, repo, options(0.5))
    return repo, onnx


@pytest.fixture()
def repo(built: tuple[Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(built[0], copy)
    return copy


def as_before_versions_json(repo: Path) -> None:
    """The layout a build before versions.json wrote: the index in the root manifest.json, no alias_version."""
    data = json.loads((repo / INDEX_NAME).read_text())
    del data["alias_version"]
    (repo / LEGACY_INDEX_NAME).write_text(json.dumps(data, indent=2) + "\n")
    (repo / INDEX_NAME).unlink()


def test_the_index_has_its_own_name_and_records_the_alias_source(repo: Path) -> None:
    assert not (repo / LEGACY_INDEX_NAME).exists()
    data = json.loads((repo / INDEX_NAME).read_text())
    assert data["layout"] == "versioned" and data["stable"] == 1 and data["alias_version"] == 1
    assert check_repository(repo, files_only=True).ok


def test_an_index_that_names_another_stable_version_than_the_alias_serves_is_refused(repo: Path) -> None:
    data = json.loads((repo / INDEX_NAME).read_text())
    data["stable"] = 2
    (repo / INDEX_NAME).write_text(json.dumps(data))
    (mismatch,) = check_repository(repo, files_only=True).mismatches
    assert mismatch.message == "the alias 'yolo' does not serve the stable version 2 (it was made from version 1)"


def test_a_repository_built_before_versions_json_still_checks(repo: Path) -> None:
    as_before_versions_json(repo)
    index = read_index(repo)
    assert index is not None and index.stable == 1 and index.alias_version is None
    result = check_repository(repo, files_only=True)
    assert result.ok, result.mismatches
    data = json.loads((repo / LEGACY_INDEX_NAME).read_text())
    data["stable"] = 2  # the alias's steps are still pinned to version 1
    (repo / LEGACY_INDEX_NAME).write_text(json.dumps(data))
    (mismatch,) = check_repository(repo, files_only=True).mismatches
    assert mismatch.message.startswith("the alias 'yolo' does not serve the stable version 2")


def test_a_repository_built_before_versions_json_rolls_out_and_moves_its_index(repo: Path) -> None:
    as_before_versions_json(repo)
    index = read_index(repo)
    assert index is not None
    promoted = state.promote(repo, index, 2, {"action": "promote"}, "20260101T000000Z")
    assert not (repo / LEGACY_INDEX_NAME).exists() and read_index(repo) == promoted
    assert promoted.stable == 2 and promoted.alias_version == 2
    result = check_repository(repo, files_only=True)
    assert result.ok, result.mismatches
    assert "the alias 'yolo' serves version 2" in result.summary()


def test_a_repository_built_before_versions_json_takes_a_new_version(repo: Path, built: tuple[Path, Path]) -> None:
    as_before_versions_json(repo)
    added = add_version(built[1], repo, options(0.4))
    assert added.version == 3 and not (repo / LEGACY_INDEX_NAME).exists()
    assert read_index(repo) == added.index and added.index.alias_version is None  # the alias did not move
    result = check_repository(repo, files_only=True)
    assert result.ok, result.mismatches
