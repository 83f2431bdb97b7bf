"""A site archive on the versioned volume (deploy/local/site_install.py): where the repository is placed, and how a
newer archive on a running site goes through the deployed stack's rollout (deploy/local/update.py).

The placing script runs here with this machine's sh and tar, as the builder image runs it. The docker CLI is the
boundary, faked on PATH: it records each call with the ``CPU_IMAGE_TAG`` compose would read, and answers the
rollout service's run with a decision record and its exit code. The live lane (tests/deploy/live/test_site.py)
rolls a real newer archive out on a real site.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from deploy.cli import main
from deploy.local import site, site_install, stack
from deploy.local.update import Update
from tests.helpers import tar_bytes

OLD, NEW = "site-old", "site-new"


def place(volume: Path, build: str, content: bytes = b"v1") -> str:
    stream = tar_bytes({f"{build}/versions.json": content, f"{build}/yolo_v1_detector/1/model.onnx": content,
                   "version-keys.json": content})
    done = subprocess.run(["sh", "-c", site_install.PLACE, "sh", build, str(volume)], input=stream,
                          capture_output=True, check=True)
    return done.stdout.decode().strip()


def tree(volume: Path) -> dict[str, bytes | str]:
    return {p.relative_to(volume).as_posix(): p.readlink().as_posix() if p.is_symlink() else p.read_bytes()
            for p in sorted(volume.rglob("*")) if p.is_symlink() or p.is_file()}


def test_a_new_site_gets_the_versioned_repository_as_served_and_a_running_one_is_left_untouched(
        tmp_path: Path) -> None:
    from deploy.entrypoints.build_models import VERSIONS_DIR

    assert VERSIONS_DIR == "versions"  # the name the placing script knows a versioned volume by
    volume = tmp_path / "models"
    volume.mkdir()
    assert place(volume, "versions") == "stable"
    assert tree(volume) == {"current": "versions", "version-keys.json": b"v1", "versions/versions.json": b"v1",
                            "versions/yolo_v1_detector/1/model.onnx": b"v1"}
    (volume / "versions" / "yolo_v2_detector").mkdir()  # the running site's own versions and record since
    (volume / "version-keys.json").write_bytes(b"site")
    before = tree(volume)
    assert place(volume, "versions", b"newer") == "running"  # a newer archive: nothing of the volume replaced
    assert tree(volume) == before and sorted(p.name for p in volume.iterdir()) == [
        "current", "version-keys.json", "versions"]  # no staging folder left behind


def test_a_versioned_archive_beside_a_classic_site_is_a_candidate_only(tmp_path: Path) -> None:
    volume = tmp_path / "models"
    (volume / "build-1").mkdir(parents=True)
    (volume / "current").symlink_to("build-1")
    assert place(volume, "versions") == "candidate"
    assert (volume / "current").readlink().as_posix() == "build-1" and (volume / "versions" / "versions.json").is_file()


@pytest.fixture()
def running_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A site installed from the archive OLD and up (its compose.env), a staged newer archive NEW, a fake docker."""
    for module in (stack, site, site_install):
        monkeypatch.setattr(module, "SITES_ROOT", tmp_path / "sites")
    monkeypatch.setattr(stack, "STATE_ROOT", tmp_path / "state")
    (tmp_path / "sites").mkdir()
    old = {"tag": OLD, "variables": site.site_variables(OLD), "settings": {}, "files": []}
    (tmp_path / "old" / "compose").mkdir(parents=True)
    site_install.write_site("p", site_install.stage_site(tmp_path / "old", old))
    state = stack.LocalStack(project="p").state
    state.mkdir(parents=True)
    (state / stack.ENV_FILE).write_text("".join(f"{k}={v}\n" for k, v in site.site_variables(OLD).items()))
    new = {"tag": NEW, "variables": site.site_variables(NEW), "settings": {"max_detections": 200}, "files": []}
    (tmp_path / "new" / "compose").mkdir(parents=True)
    staged = site_install.stage_site(tmp_path / "new", new)
    log = tmp_path / "docker-calls.log"
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$CPU_IMAGE_TAG $*" >> {log}\n'
                    'case "$*" in *rollout-cpu*) echo "rollout: decided" >&2; echo "$FAKE_RECORD"; '
                    'exit "$FAKE_EXIT";; esac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return {"staged": staged, "index": new, "log": log}


def _decide(monkeypatch: pytest.MonkeyPatch, action: str, code: int) -> None:
    monkeypatch.setenv("FAKE_RECORD", json.dumps({"action": action, "candidate": 2, "stable": 2 if code == 0 else 1,
                                                  "failed": [] if code == 0 else ["empty_share"]}))
    monkeypatch.setenv("FAKE_EXIT", str(code))


def test_a_promoted_archive_is_built_by_its_own_builder_rolled_out_and_moves_the_site(
        running_site: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _decide(monkeypatch, "promote", 0)
    control = running_site["staged"].parent / "site-frames"  # the site's own camera frames
    control.mkdir()
    (control / "gate-1.jpg").write_bytes(b"jpeg")
    change = Update(rollout_flags=("--window-s", "15"), control_images=control)
    done = site_install.roll_out("p", running_site["staged"], running_site["index"], change)
    assert (done["action"], done["exit"], done["version"]) == ("promote", 0, 2)
    builder, rollout = running_site["log"].read_text().splitlines()
    # the builder alone runs the archive's image (its ONNX) with the archive's settings; the rollout the site's own
    assert builder.startswith(f"{NEW} compose ") and " run --rm --no-deps builder-cpu " in builder
    assert "--max-detections 200" in builder
    assert rollout.startswith(f"{OLD} compose ") and rollout.endswith("rollout-cpu --window-s 15 --control-images /control")
    # the site's frames reach the rollout read-only, copied beside the stack's state (readable by its uid)
    assert ":/control:ro rollout-cpu" in rollout
    # the serving containers are never recreated by the rollout's `compose run`, whatever the site's files say now
    assert " run --rm -T --no-deps -v " in rollout
    assert site_install.installed_tag("p") == NEW  # the site's files are the new archive's
    record = json.loads(Path(done["record"]).read_text())
    assert record["tag"] == NEW and record["record"]["action"] == "promote" and "deploy_update" in record["record"]


def test_a_rolled_back_archive_leaves_the_site_on_its_files_and_install_exits_3(
        running_site: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _decide(monkeypatch, "rollback", 3)
    done = site_install.roll_out("p", running_site["staged"], running_site["index"], Update())
    assert (done["action"], done["exit"]) == ("rollback", 3)
    assert site_install.installed_tag("p") == OLD
    assert json.loads(Path(done["record"]).read_text())["record"]["failed"] == ["empty_share"]
    monkeypatch.setattr(site_install, "install_site", lambda *args: {"role": "candidate", "rollout": done})
    assert main(["install", "--local", "--project", "p", "any.tar"]) == 3  # as deploy update: 3 rolled back


def test_an_undecided_archive_leaves_the_site_on_its_files_and_install_exits_4(
        running_site: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Too little traffic for a verdict: not a rollback (3) but its own code, the site still on its files."""
    monkeypatch.setenv("FAKE_RECORD", json.dumps({"action": "undecided", "candidate": 2, "stable": 1, "failed": [],
                                                  "insufficient": ["canary_requests"]}))
    monkeypatch.setenv("FAKE_EXIT", "4")
    done = site_install.roll_out("p", running_site["staged"], running_site["index"], Update())
    assert (done["action"], done["exit"]) == ("undecided", 4)
    assert site_install.installed_tag("p") == OLD
    assert json.loads(Path(done["record"]).read_text())["record"]["insufficient"] == ["canary_requests"]
    monkeypatch.setattr(site_install, "install_site", lambda *args: {"role": "candidate", "rollout": done})
    assert main(["install", "--local", "--project", "p", "any.tar"]) == 4


def test_the_archive_the_site_runs_is_not_rolled_out_again_and_a_stopped_site_is_refused(
        running_site: dict[str, Any]) -> None:
    index = {**running_site["index"], "tag": OLD}
    assert site_install.roll_out("p", running_site["staged"], index, Update())["action"] == "none"
    (stack.LocalStack(project="p").state / stack.ENV_FILE).unlink()
    with pytest.raises(site.SiteArchiveError, match=r"the stack p is not up: python -m deploy up --local"):
        site_install.roll_out("p", running_site["staged"], running_site["index"], Update())
    assert not running_site["log"].exists()  # docker never called


@pytest.mark.parametrize(("flags", "refusal"), [
    (["--control-images", "no-such-frames"], "--control-images no-such-frames does not exist: nothing was loaded"),
    (["--control-labels", "labels.json"], "--control-labels label the images of --control-images: give both"),
])
def test_control_images_that_are_not_there_are_refused_before_the_archive_is_read(
        running_site: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        flags: list[str], refusal: str) -> None:
    monkeypatch.chdir(running_site["staged"].parent)
    (running_site["staged"].parent / "labels.json").write_text("{}")
    assert main(["install", "--local", "--project", "p", "missing.tar", *flags]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(refusal)
    assert not running_site["log"].exists()  # docker never called


def test_an_archive_is_never_made_from_an_installed_sites_files(running_site: dict[str, Any],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["archive", "--local", "--project", "p", "--output", str(running_site["staged"].parent)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("error: the project p is a site installed from an archive; make archives with another --project "
                   "(the default, or any name of yours)")
    assert not running_site["log"].exists()  # docker never called
