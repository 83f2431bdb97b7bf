"""deploy update --local's pieces that need no Docker: the builder's arguments and the user's files handed to the
containers (copied with modes their uid can read)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from deploy import commands
from deploy.errors import LocalStackError
from deploy.local import update
from deploy.local.stack import LocalStack
from deploy.settings import Settings


def test_the_builder_adds_a_version_from_the_users_onnx_with_the_extra_flags() -> None:
    args = update.builder_args(Settings(), update.Update(onnx=Path("new.onnx"), build_flags=("--conf-threshold", "0.5")))
    assert args[:4] == ["--volume=/models", "--link=current", "--versioned", "--"]
    assert args[args.index("--onnx") + 1] == update.UPDATE_ONNX
    assert args[-2:] == ["--conf-threshold", "0.5"]  # after the rendered flags: the last one wins
    assert update.builder_args(Settings(), update.Update()) == commands.builder_command(Settings(), "embedded")


def test_the_users_files_are_copied_readable_for_the_containers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deploy.local.stack.STATE_ROOT", tmp_path / "state")
    stack = LocalStack(project="p")
    images = tmp_path / "images"
    images.mkdir(mode=0o700)
    (images / "a.jpg").write_bytes(b"x")
    (images / "a.jpg").chmod(0o600)
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"onnx")
    onnx.chmod(0o600)
    mounts = update._mounts(stack, [(images, update.CONTROL_DIR), (onnx, update.UPDATE_ONNX), (None, "/x")])
    sources = [Path(m.split(":")[0]) for m in mounts[1::2]]
    assert [m.split(":", 1)[1] for m in mounts[1::2]] == [f"{update.CONTROL_DIR}:ro", f"{update.UPDATE_ONNX}:ro"]
    assert stat.S_IMODE(sources[0].stat().st_mode) == 0o755 and (sources[0] / "a.jpg").read_bytes() == b"x"
    assert stat.S_IMODE((sources[0] / "a.jpg").stat().st_mode) == 0o644
    assert stat.S_IMODE(sources[1].stat().st_mode) == 0o644 and sources[1].read_bytes() == b"onnx"
    with pytest.raises(LocalStackError, match="does not exist"):
        update._mounts(stack, [(tmp_path / "absent", update.CONTROL_DIR)])


def test_update_refuses_a_stack_that_is_not_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deploy.local.stack.STATE_ROOT", tmp_path)
    with pytest.raises(LocalStackError, match="is not up"):
        update.run_rollout(LocalStack(project="nothing"), update.Update())
