"""The detector instances' shared lock: a run is alone only while no other instance holds the lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.serving.activity import Activity, lock_path


def test_a_run_is_alone_only_while_no_other_instance_runs(tmp_path: Path) -> None:
    # flock belongs to an open file, so two handles in one process stand for two instances' processes.
    first, second = Activity(tmp_path / "step.lock"), Activity(tmp_path / "step.lock")
    try:
        with first.running_alone() as alone:
            assert alone
            with second.running_alone() as other_alone:
                assert not other_alone
        with second.running_alone() as alone_again:
            assert alone_again  # the first one's lock went with its block
    finally:
        first.close()
        second.close()


def test_one_lock_per_model_directory_and_user(tmp_path: Path) -> None:
    assert lock_path(str(tmp_path / "a")) == lock_path(str(tmp_path / "b" / ".." / "a"))
    assert lock_path(str(tmp_path / "a")) != lock_path(str(tmp_path / "b"))


def test_an_unwritable_lock_names_the_option_and_the_way_out(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"--detector-spin alone .* writable temporary directory \(TMPDIR\)"):
        Activity(tmp_path / "missing" / "step.lock")
