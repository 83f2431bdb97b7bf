"""The rollout's phase in the repository: written in one rename, read back, refused when unreadable, and never
taken by `generator check` for a stray model."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.operate.rollout.progress import (
    Progress,
    clear_progress,
    read_progress,
    started,
    write_progress,
)
from generator.repository.check import stray_entries
from generator.repository.versions import PROGRESS_NAME, RepositoryIndex, VersionError, VersionRecord


def test_the_phase_survives_a_restart_and_is_cleared_at_the_end(tmp_path: Path) -> None:
    assert read_progress(tmp_path) is None
    progress = started(1, 2)
    write_progress(tmp_path, progress)
    write_progress(tmp_path, progress.at("watching"))
    assert read_progress(tmp_path) == Progress(1, 2, "watching", progress.started)
    assert [p.name for p in tmp_path.iterdir()] == [PROGRESS_NAME]  # nothing staged is left beside it
    clear_progress(tmp_path)
    assert read_progress(tmp_path) is None


def test_a_damaged_file_or_an_unknown_phase_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / PROGRESS_NAME).write_text("{not json")
    with pytest.raises(VersionError, match=PROGRESS_NAME):
        read_progress(tmp_path)
    with pytest.raises(VersionError, match="unknown rollout phase"):
        Progress(1, 2, "dancing", 0.0)


def test_check_does_not_count_the_progress_file_as_a_stray_model(tmp_path: Path) -> None:
    index = RepositoryIndex("yolo", 1, versions={1: VersionRecord(1, "stable")})
    write_progress(tmp_path, started(1, 2))
    (tmp_path / "yolo_v9").mkdir()
    assert [m.subject for m in stray_entries(tmp_path, index)] == ["yolo_v9"]
