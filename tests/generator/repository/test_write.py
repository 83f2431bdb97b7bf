"""write_repository: all or nothing, never over a directory this tool did not write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generator.errors import RepositoryWriteError
from generator.repository.write import write_repository

FIRST = {"manifest.json": b'{"v": 1}', "yolo/config.pbtxt": b"first", "yolo/1/.keep": b""}
SECOND = {"manifest.json": b'{"v": 2}', "yolo_nms/config.pbtxt": b"second", "yolo_nms/1/model.py": b"pass\n"}


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".building-" in p.name or p.name.endswith(".previous"))


def test_fresh_write_creates_parents(tmp_path: Path) -> None:
    output = tmp_path / "deep" / "repo"
    write_repository(output, FIRST)
    assert tree(output) == FIRST
    assert leftovers(output.parent) == []


def test_generated_repository_is_replaced_entirely(tmp_path: Path) -> None:
    output = tmp_path / "repo"
    write_repository(output, FIRST)
    write_repository(output, SECOND)
    assert tree(output) == SECOND  # nothing of the first build survives
    assert leftovers(tmp_path) == []


def test_foreign_directory_is_refused_without_force(tmp_path: Path) -> None:
    output = tmp_path / "repo"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    with pytest.raises(RepositoryWriteError, match=r"was not written by this tool \(no manifest.json\).*--force"):
        write_repository(output, FIRST)
    assert tree(output) == {"notes.txt": b"mine"}
    assert leftovers(tmp_path) == []
    write_repository(output, FIRST, force=True)
    assert tree(output) == FIRST


def test_a_file_in_the_way_is_refused_without_force(tmp_path: Path) -> None:
    output = tmp_path / "repo"
    output.write_text("a file")
    with pytest.raises(RepositoryWriteError, match="was not written by this tool"):
        write_repository(output, FIRST)
    assert output.read_text() == "a file"
    write_repository(output, FIRST, force=True)
    assert tree(output) == FIRST and leftovers(tmp_path) == []


@pytest.mark.parametrize("kept", [".gitignore", ".gitkeep"])
def test_checkout_placeholder_files_are_preserved(tmp_path: Path, kept: str) -> None:
    output = tmp_path / "model_repository"
    output.mkdir()
    (output / kept).write_text("*\n!.gitignore\n")
    write_repository(output, FIRST)  # a folder holding only a placeholder counts as empty
    assert (output / kept).read_text() == "*\n!.gitignore\n"
    write_repository(output, SECOND)
    assert tree(output) == {**SECOND, kept: b"*\n!.gitignore\n"}


def test_failure_midway_leaves_the_previous_repository_intact(tmp_path: Path) -> None:
    output = tmp_path / "repo"
    write_repository(output, FIRST)
    # "yolo/config.pbtxt" is written as a file, so "yolo/config.pbtxt/x" cannot be created.
    broken = {**SECOND, "yolo/config.pbtxt": b"x", "yolo/config.pbtxt/x": b"y"}
    with pytest.raises(RepositoryWriteError, match="cannot write"):
        write_repository(output, broken)
    assert tree(output) == FIRST
    assert leftovers(tmp_path) == []


def test_failure_midway_on_a_fresh_output_leaves_nothing(tmp_path: Path) -> None:
    output = tmp_path / "repo"
    with pytest.raises(RepositoryWriteError, match="cannot write"):
        write_repository(output, {"a": b"1", "a/b": b"2"})
    assert not output.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_stale_backup_from_a_crashed_run_does_not_block(tmp_path: Path) -> None:
    output = tmp_path / "repo"
    write_repository(output, FIRST)
    (tmp_path / ".repo.previous").mkdir()
    (tmp_path / ".repo.previous" / "old").write_text("stale")
    write_repository(output, SECOND)
    assert tree(output) == SECOND and leftovers(tmp_path) == []


@pytest.mark.parametrize("relative", ["../escape.txt", "yolo/../../escape.txt", "/etc/escape.txt", "", "."])
def test_paths_outside_the_repository_are_refused(tmp_path: Path, relative: str) -> None:
    output = tmp_path / "inner" / "repo"
    write_repository(output, FIRST)
    with pytest.raises(RepositoryWriteError, match="refusing to write outside the repository"):
        write_repository(output, {**SECOND, relative: b"evil"})
    assert tree(output) == FIRST
    assert not (tmp_path / "inner" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    assert leftovers(output.parent) == []


def test_an_unwritable_location_is_a_repository_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(RepositoryWriteError, match="cannot write"):
        write_repository(blocker / "repo", FIRST)


def test_a_mount_point_is_refused_with_where_to_write_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    volume = tmp_path / "models"
    volume.mkdir()
    # Stands in for a container volume: its root cannot be renamed, so no atomic swap is possible there.
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == volume)
    with pytest.raises(RepositoryWriteError, match=r"is a mount point.*--output .*models/repository"):
        write_repository(volume, {"a/config.pbtxt": b"x"})
    assert list(volume.iterdir()) == []
    write_repository(volume / "repository", {"a/config.pbtxt": b"x"})
    assert (volume / "repository" / "a" / "config.pbtxt").read_bytes() == b"x"
