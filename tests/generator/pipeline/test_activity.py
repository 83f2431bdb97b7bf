"""Activity: the detector learns whether any other step of its ensemble is running, across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from generator.pipeline.activity import Activity, lock_path


def test_alone_when_no_other_step_runs(tmp_path: Path) -> None:
    detector = Activity(tmp_path / "lock")
    with detector.running_alone() as alone:
        assert alone
    with detector.running_alone() as alone:  # the lock was released after the first run
        assert alone


def test_not_alone_while_another_step_runs(tmp_path: Path) -> None:
    # Separate descriptors behave like separate processes for flock.
    preprocess, detector = Activity(tmp_path / "lock"), Activity(tmp_path / "lock")
    with preprocess.running(), detector.running_alone() as alone:
        assert not alone
    with detector.running_alone() as alone:
        assert alone


def test_a_running_detector_is_seen_by_the_other_instance(tmp_path: Path) -> None:
    first, second = Activity(tmp_path / "lock"), Activity(tmp_path / "lock")
    with first.running_alone() as first_alone, second.running_alone() as second_alone:
        assert first_alone and not second_alone


def test_another_process_holding_the_lock_counts(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    holder = textwrap.dedent(f"""
        import sys, time
        from generator.pipeline.activity import Activity
        with Activity({str(path)!r}).running():
            print("holding", flush=True)
            sys.stdin.readline()
    """)
    child = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "holding"
        with Activity(path).running_alone() as alone:
            assert not alone
    finally:
        child.communicate("done\n", timeout=30)
    with Activity(path).running_alone() as alone:  # released when the other process let go
        assert alone


def test_lock_path_is_shared_by_the_steps_of_one_ensemble(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    repository.mkdir()
    same = lock_path(str(repository), "yolo")
    assert lock_path(str(repository / "." ), "yolo") == same
    assert lock_path(str(repository), "other") != same
    assert lock_path(str(tmp_path), "yolo") != same
