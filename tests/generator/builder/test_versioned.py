"""`generator build --version`: versions beside each other, one rename each, the alias, the prune rule, `check`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.builder.spec.options import BuildOptions
from generator.builder.stages.config.render import parse_config
from generator.builder.versioned import add_version
from generator.demo import DEMO_ONNX
from generator.errors import ModelInspectionError, RepositoryWriteError
from generator.repository.versions import VersionError, read_index
from generator.repository.write import write_repository

ROOT = Path(__file__).resolve().parents[3]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def repository(tmp_path: Path) -> Path:
    path = tmp_path / "repository"
    add_version(DEMO_ONNX, path, BuildOptions(name="yolo", max_batch=2))
    return path


def test_versions_sit_side_by_side_each_pinned_to_its_own_folder(repository: Path) -> None:
    second = add_version(DEMO_ONNX, repository, BuildOptions(name="yolo", max_batch=2, conf_threshold=0.5))
    assert second.version == 2 and second.index.stable == 1 and second.index.served == (1, 2)
    for version in (1, 2):
        ensemble = parse_config("e", (repository / f"yolo_v{version}" / "config.pbtxt").read_text())
        assert {(s.model_name, s.model_version) for s in ensemble.ensemble_scheduling.step} == {
            (f"yolo_v{version}_{step}", version) for step in ("preprocess", "detector", "nms")}
        nms = parse_config("n", (repository / f"yolo_v{version}_nms" / "config.pbtxt").read_text())
        assert list(nms.version_policy.specific.versions) == [version]
        assert (repository / f"yolo_v{version}_detector" / str(version) / "model.onnx").is_file()
        manifest = json.loads((repository / f"yolo_v{version}" / "manifest.json").read_text())
        assert manifest["version"] == version and manifest["rebuild"][-2:] == ["--version", str(version)]
    alias = parse_config("yolo", (repository / "yolo" / "config.pbtxt").read_text())
    assert {s.model_version for s in alias.ensemble_scheduling.step} == {1}  # the alias stays on stable


def test_a_taken_version_a_failed_build_and_a_foreign_repository_change_nothing(repository: Path,
                                                                                tmp_path: Path) -> None:
    before = snapshot(repository)
    with pytest.raises(VersionError, match="already has version 1"):
        add_version(DEMO_ONNX, repository, BuildOptions(name="yolo"), version=1)
    with pytest.raises(VersionError, match="serves ensemble 'yolo', not 'other'"):
        add_version(DEMO_ONNX, repository, BuildOptions(name="other"))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(ModelInspectionError, match="is not a valid ONNX model"):
        add_version(broken, repository, BuildOptions(name="yolo"))
    assert snapshot(repository) == before
    # A write that fails half-way (a file where a model folder of the new version goes) takes back what it added.
    (repository / "yolo_v2_detector").write_text("in the way")
    before = snapshot(repository)
    with pytest.raises(RepositoryWriteError, match="cannot update"):
        add_version(DEMO_ONNX, repository, BuildOptions(name="yolo", max_batch=2))
    assert snapshot(repository) == before and not (repository / "yolo_v2").exists()
    classic = tmp_path / "classic"
    write_repository(classic, {"manifest.json": b"{}"})
    with pytest.raises(VersionError, match="holds an unversioned build; pass --force"):
        add_version(DEMO_ONNX, classic, BuildOptions(name="yolo"))


def test_keep_versions_prunes_the_oldest_candidates(repository: Path) -> None:
    for _ in range(3):
        result = add_version(DEMO_ONNX, repository, BuildOptions(name="yolo", max_batch=2), keep_versions=2)
    assert result.index.served == (1, 4) and result.pruned == (3,)
    assert not (repository / "yolo_v2").exists() and not (repository / "yolo_v3_nms").exists()
    index = read_index(repository)
    assert index is not None and index.keep_versions == 2


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_build_cli_adds_the_next_version_and_check_verifies_every_one(repository: Path) -> None:
    built = run_cli("build", "--output", str(repository), "--max-batch", "2")
    assert built.returncode == 0, built.stderr
    assert "Built version 2 of 'yolo'" in built.stdout and "as a candidate" in built.stdout
    checked = run_cli("check", "--files-only", str(repository))
    assert checked.returncode == 0, checked.stderr
    assert "versions 1, 2 match their manifests; the alias 'yolo' serves version 1" in checked.stdout
    validated = run_cli("validate", "--model-repository", str(repository), "--version", "2", "--count", "4")
    assert validated.returncode == 0, validated.stderr
    assert (repository / "yolo_v2" / "validation.json").is_file()  # beside the version, not at the root
    assert run_cli("check", "--files-only", str(repository)).returncode == 0  # its report is no build file
    (repository / "yolo_v2_nms" / "2" / "model.py").write_text("# changed\n")
    (repository / "stray_model").mkdir()
    checked = run_cli("check", "--files-only", str(repository))
    assert checked.returncode == 1
    assert "version 2: code file yolo_v2_nms/2/model.py changed since build" in checked.stderr
    assert "stray_model belongs to no version of 'yolo'" in checked.stderr
    refused = run_cli("build", "--output", str(repository), "--version", "x")
    assert refused.returncode == 1 and "--version must be a positive integer or 'next'" in refused.stderr
