"""deploy/entrypoints/build_models.py: the models volume only ever points Triton at a complete repository.

The kill test runs the real builder entry point (``python -m deploy.entrypoints.build_models`` with the rendered flags of
the CPU stack's builder, a real build of the demo) in a subprocess and SIGKILLs its process group at random
moments, many of them while the repository is being written; after every kill ``current`` must be the old
or the new repository, complete and accepted by ``generator check``.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy import commands
from deploy.entrypoints import build_models
from deploy.entrypoints.build_models import VolumeError, install, remove_stale, switch_link
from deploy.settings import Settings
from generator.demo import DEMO_ONNX

LINK = commands.CURRENT_LINK


def _flags(**settings: object) -> list[str]:
    """The CPU stack's rendered build flags for the bundled demo."""
    return commands.build_args(Settings(**settings), "onnxruntime", onnx=str(DEMO_ONNX))  # type: ignore[arg-type]


def _snapshot(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _check(repository: Path) -> int:
    return subprocess.run([sys.executable, "-m", "generator", "check", str(repository)],
                          capture_output=True, check=False).returncode


def test_the_key_follows_the_onnx_and_the_flags(tmp_path: Path) -> None:
    flags = _flags()
    assert build_models.build_key(flags) == build_models.build_key(list(flags))
    assert build_models.build_key(flags) != build_models.build_key(_flags(max_detections=50))
    other = tmp_path / "other.onnx"
    other.write_bytes(Path(DEMO_ONNX).read_bytes() + b"\0")
    assert build_models.build_key(flags) != build_models.build_key([*_flags()[:2], "--onnx", str(other), *flags[4:]])
    with pytest.raises(VolumeError, match="does not exist"):
        build_models.build_key(["--onnx", str(tmp_path / "missing.onnx")])


def test_switching_the_link_is_one_rename_and_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "build-a").mkdir()
    (tmp_path / "build-b").mkdir()
    assert switch_link(tmp_path, LINK, "build-a") is None
    assert switch_link(tmp_path, LINK, "build-b") == "build-a"
    assert (tmp_path / LINK).resolve() == (tmp_path / "build-b").resolve()
    assert str((tmp_path / LINK).readlink()) == "build-b"  # relative: resolves in every container's mount
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build-a", "build-b", LINK]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / LINK).mkdir()
    with pytest.raises(VolumeError, match="not a symlink"):
        switch_link(foreign, LINK, "build-a")


def test_only_this_tools_leftovers_are_removed(tmp_path: Path) -> None:
    for name in ("build-keep", "build-old", ".build-new.building-x1", ".build-new.previous", "lost+found"):
        (tmp_path / name).mkdir()
    (tmp_path / ".current.tmp-123").symlink_to("build-old")
    (tmp_path / "notes.txt").write_text("operator's file")
    removed = remove_stale(tmp_path, {"build-keep"}, LINK)
    assert sorted(removed) == sorted(["build-old", ".build-new.building-x1", ".build-new.previous", ".current.tmp-123"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build-keep", "lost+found", "notes.txt"]


def test_install_builds_checks_switches_and_then_reuses(tmp_path: Path) -> None:
    first = install(tmp_path, LINK, _flags())
    assert (tmp_path / LINK).resolve() == first.resolve() and _check(tmp_path / LINK) == 0
    before = first.stat().st_ino, _snapshot(first)
    again = install(tmp_path, LINK, _flags())  # same settings: generator check accepts it, no rebuild
    assert again == first and (first.stat().st_ino, _snapshot(first)) == before
    second = install(tmp_path, LINK, _flags(max_detections=50))  # new settings: a new build
    assert second != first and (tmp_path / LINK).resolve() == second.resolve()
    third = install(tmp_path, LINK, _flags(max_detections=40))
    # The new and the previous build stay (a running Triton may still read the previous); older ones go.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([LINK, second.name, third.name])


def test_a_failed_build_leaves_the_link_where_it_was(tmp_path: Path) -> None:
    first = install(tmp_path, LINK, _flags())
    with pytest.raises(VolumeError, match="still points at the previous repository"):
        install(tmp_path, LINK, [*_flags(max_batch=8), "--conf-threshold", "2"])  # refused by the generator
    assert (tmp_path / LINK).resolve() == first.resolve() and _check(tmp_path / LINK) == 0
    with pytest.raises(VolumeError, match="--output"):
        install(tmp_path, LINK, [*_flags(), "--output", "/models"])


def test_the_cli_says_what_is_wrong_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build_models.main(["--volume", str(tmp_path / "absent"), "--", *_flags()]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("build_models: ")


def _start(volume: Path, flags: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "deploy.entrypoints.build_models", f"--volume={volume}", "--", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _staging(volume: Path) -> list[Path]:
    return [p for p in volume.iterdir() if p.name.startswith(".build-") and ".building-" in p.name]


def _calibrate(volume: Path, flags: list[str]) -> tuple[float, float, float]:
    """One uninterrupted run: seconds until the staging directory appears, to write it, and in all."""
    started = time.monotonic()
    process = _start(volume, flags)
    appeared = written = None
    while process.poll() is None:
        now = time.monotonic()
        if appeared is None and _staging(volume):
            appeared = now
            assert all(p.stat().st_dev == volume.stat().st_dev for p in _staging(volume))  # on the volume
        if appeared is not None and written is None and not _staging(volume):
            written = now
        time.sleep(0.0005)
    assert process.returncode == 0 and appeared is not None
    return appeared - started, (written or time.monotonic()) - appeared, time.monotonic() - started


def _reset(volume: Path, old: str) -> None:
    """Back to: `current` on the old build, nothing else."""
    switch_link(volume, LINK, old)
    remove_stale(volume, {old, LINK}, LINK)


@pytest.mark.slow
def test_a_build_killed_at_any_moment_leaves_the_old_or_the_new_repository(tmp_path: Path) -> None:
    volume = tmp_path / "models"
    volume.mkdir()
    old = install(volume, LINK, _flags())
    old_files = _snapshot(old)
    new_flags = _flags(max_detections=50)
    new_name = build_models.BUILD_PREFIX + build_models.build_key(new_flags)
    until_staging, writing, total = _calibrate(volume, new_flags)
    _reset(volume, old.name)
    rng = random.Random(20261201)
    outcomes = {"old": 0, "new": 0, "killed while writing": 0}
    for attempt in range(12):
        process = _start(volume, new_flags)
        if attempt < 3:  # anywhere in the run: start-up, build, write, check, switch, clean-up
            time.sleep(rng.uniform(0, total))
        elif attempt < 11:  # while the repository is being written, or after: while it is checked
            while not _staging(volume) and process.poll() is None:
                time.sleep(0.0005)
            after = total - until_staging - writing
            time.sleep(rng.uniform(0, writing) if attempt < 9 else writing + rng.uniform(0, after))
        else:  # the moment the link has switched: while old builds are being removed
            while (volume / LINK).resolve().name == old.name and process.poll() is None:
                time.sleep(0.0005)
        outcomes["killed while writing"] += bool(_staging(volume)) and process.poll() is None
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        target = (volume / LINK).resolve()
        assert target.name in (old.name, new_name), f"attempt {attempt}: current -> {target.name}"
        if target.name == old.name:
            assert _snapshot(target) == old_files, f"attempt {attempt}: the old repository changed"
            outcomes["old"] += 1
        else:
            outcomes["new"] += 1
        assert _check(volume / LINK) == 0, f"attempt {attempt}: current fails generator check"
        if (volume / new_name).is_dir():  # the generator's own write is atomic too: complete or absent
            assert _check(volume / new_name) == 0, f"attempt {attempt}: a partial {new_name} exists"
        _reset(volume, old.name)
    print(f"\nkills: {outcomes}; {until_staging:.2f} s until the write, write {writing * 1000:.1f} ms, "
          f"run {total:.2f} s")
    assert outcomes["killed while writing"] >= 3 and outcomes["new"] >= 1, outcomes
    shutil.rmtree(volume)


def test_versioned_builds_add_a_version_beside_the_stable_one_and_reuse_a_built_key(tmp_path: Path) -> None:
    """--versioned (what compose and Kubernetes run): the first build is stable, new settings add a candidate,
    the same settings reuse their version; `current` moves once, from a classic build to the versioned repository."""
    from generator.repository.versions import read_index

    volume = tmp_path / "models"
    volume.mkdir()
    classic = install(volume, LINK, _flags())  # a volume from before versions: current -> build-<key>
    repository, first = build_models.install_version(volume, LINK, _flags())
    assert (first, (volume / LINK).resolve()) == (1, repository.resolve())
    assert classic.is_dir()  # the previous repository stays until the next build: a running Triton may read it
    _, again = build_models.install_version(volume, LINK, _flags())
    assert again == 1 and sorted(read_index(repository).versions) == [1]  # type: ignore[union-attr]
    _, second = build_models.install_version(volume, LINK, _flags(max_detections=50))
    index = read_index(repository)
    assert second == 2 and index is not None and index.stable == 1 and index.versions[2].state == "candidate"
    assert not classic.exists() and _check(volume / LINK) == 0
    with pytest.raises(VolumeError, match="--version"):
        build_models.install_version(volume, LINK, [*_flags(), "--version", "3"])


def test_the_proxy_limit_is_the_served_versions_and_follows_each_build(tmp_path: Path) -> None:
    """The builder writes the stable version's max_in_flight for the proxy; a candidate does not change it."""
    from deploy import proxy_admission

    volume = tmp_path / "models"
    volume.mkdir()
    repository = build_models.fill(volume, LINK, _flags(max_queue_ms=2000), versioned=True)
    stable = proxy_admission.max_in_flight(repository / "yolo_v1" / "manifest.json")
    snippet = (volume / proxy_admission.SNIPPET).read_text()
    assert stable is not None and f"limit_conn admission {stable};\n" in snippet and "yolo_v1/manifest.json" in snippet
    build_models.fill(volume, LINK, _flags(max_queue_ms=4000), versioned=True)  # version 2, a candidate
    candidate = proxy_admission.max_in_flight(repository / "yolo_v2" / "manifest.json")
    assert candidate is not None and candidate > stable
    assert (volume / proxy_admission.SNIPPET).read_text() == snippet
    assert sorted(p.name for p in volume.iterdir() if "admission" in p.name) == [proxy_admission.SNIPPET]
