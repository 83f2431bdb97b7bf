"""An offline site from one archive: made here, refused when tampered (nothing loaded), installed with its images
absent from the daemon, started with no pull and no build (the builds' network cut), detections through the proxy.

The daemon is shared (other projects and, locally, other people's stacks), so this module touches only what is
its own: the archive's images carry the tag ``live-<pid>`` (``deploy archive --tag``) under ``tde-site/``, which
``deploy archive`` removes from this machine again once saved and which nothing else uses; the stack runs as its
own compose project. Removing those tags leaves the image content that the stack's own tags still name (the
images ``deploy build`` made): what proves the archive whole for a daemon that has none of it is ``docker
save``'s own manifest, whose every layer ``deploy install`` finds in the verified tar before it loads anything.
Runs last in the lane (conftest.ORDER): it builds nothing the other modules lack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients import DetectionClient
from deploy.local import site, stack
from deploy.settings import Settings

from .conftest import REPO, _no_engine, docker, probe_image

pytestmark = [pytest.mark.live]

PROJECT = f"tde-site-{os.getpid()}"
TAG = f"live-{os.getpid()}"
# The images this module builds (layer-cached from the lane's) get names of its own (compose reads them from the
# environment before deploy/.env), so that building them never moves the tags another project's stack runs from.
BUILT = {"TRITON_CPU_IMAGE": f"tde-site-build-{os.getpid()}/yolo-triton-cpu",
         "BUILDER_CPU_IMAGE": f"tde-site-build-{os.getpid()}/yolo-builder-cpu"}
TIMEOUT_S = 1800


@dataclass
class Archive:
    path: Path
    index: dict[str, Any]
    make_s: float

    @property
    def refs(self) -> list[str]:
        return [image["ref"] for image in self.index["images"]]


def deploy(*args: str, timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, check=False, env={**os.environ, **BUILT})


def present(refs: list[str]) -> list[str]:
    return [ref for ref in refs if docker("image", "inspect", ref, check=False).returncode == 0]


def remove_own_tags(refs: list[str]) -> None:
    """Untag the archive's own refs, never another's: each is tde-site/<name>:live-<pid>."""
    own = [ref for ref in present(refs) if ref.startswith(f"{site.SITE_REPO}/") and ref.endswith(f":{TAG}")]
    assert own == present(refs), f"refusing to remove images that are not this test's: {present(refs)}"
    if own:
        docker("image", "rm", *own)


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    reason = _no_engine()
    if reason is not None:
        if os.environ.get("TDE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the live-stack lane needs Docker: {reason}")
        pytest.skip(f"no Docker Engine for the live-stack lane: {reason}")
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    made = deploy("archive", "--local", "--project", PROJECT, "--no-pull", "--tag", TAG, "--output", str(out))
    make_s = time.monotonic() - started
    assert made.returncode == 0, f"deploy archive failed: {made.stderr[-3000:]}"
    (path,) = [Path(p) for p in json.loads(made.stdout.strip().splitlines()[-1])["archive"]]
    with tarfile.open(path) as tar:
        handle = tar.extractfile(site.INDEX)
        index = json.loads(handle.read() if handle else b"")
    made_archive = Archive(path, index, make_s)
    try:
        yield made_archive
    finally:
        deploy("down", "--local", "--project", PROJECT, timeout_s=900)
        shutil.rmtree(site.site_dir(PROJECT), ignore_errors=True)
        remove_own_tags(made_archive.refs)
        built = [f"{name}:{Settings().cpu_image_tag}" for name in BUILT.values()]  # this module's own names
        docker("image", "rm", *present(built), check=False)


def test_a_tampered_archive_is_refused_by_name_and_loads_nothing(archive: Archive) -> None:
    assert present(archive.refs) == [], "deploy archive leaves none of its own tags on the machine that made it"
    with tarfile.open(archive.path) as tar:
        images = tar.getmember(site.IMAGES)
    middle = images.offset_data + images.size // 2
    with archive.path.open("r+b") as handle:
        handle.seek(middle)
        byte = handle.read(1)
        handle.seek(middle)
        handle.write(bytes([byte[0] ^ 0x01]))
    try:
        refused = deploy("install", "--local", "--project", PROJECT, str(archive.path))
    finally:
        with archive.path.open("r+b") as handle:
            handle.seek(middle)
            handle.write(byte)
    err = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 1
    assert err.startswith(f"error: refusing the archive {archive.path.name}: images/stack.tar has sha256 ")
    assert err.endswith("altered or damaged; nothing was loaded")
    assert present(archive.refs) == []
    assert docker("volume", "inspect", site.volume_name(PROJECT), check=False).returncode != 0
    assert not site.site_dir(PROJECT).exists()


def test_the_installed_site_starts_without_pull_or_build_and_serves(archive: Archive, scenes: list[bytes]) -> None:
    remove_own_tags(archive.refs)
    assert present(archive.refs) == []
    started = time.monotonic()
    installed = deploy("install", "--local", "--project", PROJECT, str(archive.path))
    install_s = time.monotonic() - started
    assert installed.returncode == 0, f"deploy install failed: {installed.stderr[-3000:]}"
    assert json.loads(installed.stdout.strip().splitlines()[-1])["role"] == "stable"
    assert {ref: docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip() for ref in archive.refs} == {
        image["ref"]: image["id"] for image in archive.index["images"]}

    started = time.monotonic()
    up = deploy("up", "--local", "--project", PROJECT, "--publish", "auto", "--no-pull", "--build-network", "none")
    up_s = time.monotonic() - started
    assert up.returncode == 0, f"deploy up of the installed site failed: {up.stderr[-3000:]}"
    assert "no image is built or pulled" in up.stderr and "building " not in up.stderr
    endpoints = json.loads(up.stdout.strip().splitlines()[-1])

    def compose(*args: str) -> str:
        command = ["docker", *stack.compose_args(PROJECT, *args)]
        env = {**os.environ, **stack.read_env_file(stack.LocalStack(project=PROJECT))}
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=True).stdout

    builder = compose("ps", "--all", "-q", "builder-cpu").strip()
    assert docker("inspect", "--format", "{{.HostConfig.NetworkMode}} {{.State.ExitCode}} {{.Config.Image}}",
                  builder).stdout.split() == ["none", "0", f"tde-site/yolo-builder-cpu:{TAG}"]
    logs = docker("logs", builder)
    assert f"{archive.index['repository']['build']} already matches" in logs.stdout + logs.stderr  # not rebuilt
    triton = compose("ps", "-q", "triton-cpu").strip()
    assert docker("inspect", "--format", "{{.Config.Image}}", triton).stdout.strip() == f"tde-site/yolo-triton-cpu:{TAG}"

    with DetectionClient(endpoints["grpcs"], ca_cert=Path(endpoints["ca_cert"]), timeout_s=10) as client:
        client.detect(probe_image())
        found = [len(result) for result in client.detect_many(scenes)]
    assert len(found) == len(scenes) and sum(found) > 0, found
    print(f"\nsite archive: {archive.path.stat().st_size / 2**20:.0f} MiB; deploy archive {archive.make_s:.0f} s, "
          f"deploy install {install_s:.0f} s, deploy up (installed site) {up_s:.0f} s")
