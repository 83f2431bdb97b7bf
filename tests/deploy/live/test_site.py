"""An offline site from one archive: made here, refused when tampered (nothing loaded), installed on a Docker daemon
that has none of its images, started with no registry and no network out, detections through the proxy.

Two daemons play the two machines. The archive is made with the lane's daemon (the connected machine: it builds
or reuses the stack's images). The site is a second ``dockerd`` this module starts and stops itself, with its own
data root, socket and containerd namespace, so its image store starts empty: every layer the stack runs comes out
of the archive. It has no bridge of its own, no iptables rules (so no masquerade: containers reach nothing outside
the host), and a proxy that answers nothing for any pull. Nothing of the lane's daemon is touched but what this
module makes there: image names of its own (``BUILT``, read by compose before deploy/.env) and the archive's tags
(``tde-site/<name>:live-<pid>``, which ``deploy archive`` removes again once saved). Runs last in the lane.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients import NO_RETRY, DetectionClient
from deploy.local import site, stack
from deploy.settings import Settings

from .conftest import _no_engine, docker, probe_image
from .site_daemon import TIMEOUT_S, SiteDaemon, make_site_archive, running_site_daemon
from .site_daemon import deploy as run_deploy

pytestmark = [pytest.mark.live]

PID = os.getpid()
PROJECT = f"tde-site-{PID}"
MAKER = f"tde-site-make-{PID}"  # the connected machine's project: its compose files, never the site's installed ones
TAG = f"live-{PID}"
NEWER = f"live-{PID}-newer"
WORSE = f"live-{PID}-worse"
# A short window keeps the lane's time (as test_rollout.py; every limit is the default).
ROLLOUT_FLAGS = "--window-s 15 --watch-s 10 --canary-percent 30"
# The images this module builds (layer-cached from the lane's) get names of its own, so that building them never
# moves the tags another project's stack runs from.
BUILT = {"TRITON_CPU_IMAGE": f"tde-site-build-{PID}/yolo-triton-cpu",
         "BUILDER_CPU_IMAGE": f"tde-site-build-{PID}/yolo-builder-cpu"}


@dataclass
class Archive:
    path: Path
    index: dict[str, Any]
    make_s: float

    @property
    def refs(self) -> list[str]:
        return [image["ref"] for image in self.index["images"]]


def deploy(*args: str, env: dict[str, str] | None = None, timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return run_deploy(*args, env={**BUILT, **(env or {})}, timeout_s=timeout_s)


def present(refs: list[str]) -> list[str]:
    """Those of ``refs`` the lane's daemon has."""
    return [ref for ref in refs if docker("image", "inspect", ref, check=False).returncode == 0]


def _engine_or_skip() -> None:
    reason = _no_engine()
    if reason is not None:
        if os.environ.get("TDE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the live-stack lane needs Docker: {reason}")
        pytest.skip(f"no Docker Engine for the live-stack lane: {reason}")


def make_archive(out: Path, tag: str, *extra: str) -> Archive:
    return Archive(*make_site_archive(out, MAKER, tag, *extra, env=BUILT))


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    _engine_or_skip()
    out = tmp_path_factory.mktemp("site")
    try:
        yield make_archive(out, TAG)
    finally:
        for made in out.glob("*.tar"):  # 1.7 GB each: the CI machine's disk is shared by every lane
            made.unlink()
        built = [f"{name}:{Settings().cpu_image_tag}" for name in BUILT.values()]  # this module's own names
        docker("image", "rm", *present(built), check=False)


@pytest.fixture(scope="module")
def site_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteDaemon]:
    """A dockerd of the site's own (module docstring), stopped and removed at the end."""
    _engine_or_skip()
    log = tmp_path_factory.mktemp("site-daemon") / "dockerd.log"
    with running_site_daemon(f"tde-site-{PID}", log, PROJECT, BUILT) as handle:
        yield handle


def test_a_tampered_archive_is_refused_by_name_and_loads_nothing(archive: Archive, site_daemon: SiteDaemon) -> None:
    """One byte changed in the middle of images/stack.tar: refused by the parts' .sha256 listing (naming the part),
    and without the listing by the index inside (naming the member); either way nothing is loaded."""
    assert present(archive.refs) == [], "deploy archive leaves none of its own tags on the machine that made it"
    with tarfile.open(archive.path) as tar:
        images = tar.getmember(site.IMAGES)
    middle = images.offset_data + images.size // 2
    listing = archive.path.with_name(f"{archive.path.name}.sha256")
    aside = listing.with_name("aside.sha256")
    with archive.path.open("r+b") as handle:
        handle.seek(middle)
        byte = handle.read(1)
        handle.seek(middle)
        handle.write(bytes([byte[0] ^ 0x01]))
    try:
        by_part = site_daemon.deploy("install", "--local", "--project", PROJECT, str(archive.path))
        listing.rename(aside)
        by_member = site_daemon.deploy("install", "--local", "--project", PROJECT, str(archive.path))
    finally:
        if aside.exists():
            aside.rename(listing)
        with archive.path.open("r+b") as handle:
            handle.seek(middle)
            handle.write(byte)
    name = archive.path.name
    for refused, what in ((by_part, f"part {name} has sha256 "), (by_member, "images/stack.tar has sha256 ")):
        err = refused.stderr.strip().splitlines()[-1]
        assert refused.returncode == 1
        assert err.startswith(f"error: refusing the archive {name}: {what}"), err
        assert "altered or damaged" in err and err.endswith("nothing was loaded")
    assert site_daemon.images() == []
    assert site_daemon.docker("volume", "ls", "-q").stdout.split() == []
    assert not site.site_dir(PROJECT).exists()


def test_the_site_installs_on_an_empty_daemon_starts_offline_and_serves(archive: Archive, site_daemon: SiteDaemon,
                                                                         scenes: list[bytes]) -> None:
    assert site_daemon.images() == []
    started = time.monotonic()
    installed = site_daemon.deploy("install", "--local", "--project", PROJECT, str(archive.path))
    install_s = time.monotonic() - started
    assert installed.returncode == 0, f"deploy install failed: {installed.stderr[-3000:]}"
    assert json.loads(installed.stdout.strip().splitlines()[-1])["role"] == "stable"
    assert sorted(site_daemon.images()) == sorted(archive.refs)

    started = time.monotonic()
    up = site_daemon.deploy("up", "--local", "--project", PROJECT, "--publish", "auto", "--no-pull",
                            "--build-network", "none")
    up_s = time.monotonic() - started
    assert up.returncode == 0, f"deploy up of the installed site failed: {up.stderr[-3000:]}"
    assert "no image is built or pulled" in up.stderr and "building " not in up.stderr
    endpoints = json.loads(up.stdout.strip().splitlines()[-1])

    def compose(*args: str) -> str:
        env = {**os.environ, **site_daemon.env, **stack.read_env_file(stack.LocalStack(project=PROJECT))}
        return subprocess.run(["docker", *stack.compose_args(PROJECT, *args)], env=env, capture_output=True,
                              text=True, timeout=120, check=True).stdout

    builder = compose("ps", "--all", "-q", "builder-cpu").strip()
    assert site_daemon.docker("inspect", "--format", "{{.HostConfig.NetworkMode}} {{.State.ExitCode}} {{.Config.Image}}",
                              builder).stdout.split() == ["none", "0", f"tde-site/yolo-builder-cpu:{TAG}"]
    logs = site_daemon.docker("logs", builder)
    assert archive.index["repository"]["build"] == "versions"  # the builder's versioned repository, version 1
    assert "version 1 of /models/versions was built from these settings (stable); reusing it" in (
        logs.stdout + logs.stderr)  # not rebuilt
    triton = compose("ps", "-q", "triton-cpu").strip()
    outside = site_daemon.docker("exec", triton, "python3", "-c",
                                 "import socket; socket.create_connection(('deb.debian.org', 80), timeout=5)",
                                 check=False)
    assert outside.returncode != 0  # no way out of the site's containers

    with DetectionClient(endpoints["grpcs"], ca_cert=Path(endpoints["ca_cert"]), timeout_s=10) as client:
        client.detect(probe_image())
        found = [len(result) for result in client.detect_many(scenes)]
    assert len(found) == len(scenes) and sum(found) > 0, found
    print(f"\nsite archive: {archive.path.stat().st_size / 2**20:.0f} MiB; deploy archive {archive.make_s:.0f} s, "
          f"deploy install (empty daemon) {install_s:.0f} s, deploy up (installed site) {up_s:.0f} s")


class Traffic:
    """One thread sending scenes over HTTPS through the site's proxy (which splits them), no retries."""

    def __init__(self, endpoints: dict[str, str], images: list[bytes]) -> None:
        self.endpoints, self.images = endpoints, images
        self.errors: list[str] = []
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with DetectionClient(self.endpoints["https"], ca_cert=Path(self.endpoints["ca_cert"]), timeout_s=10,
                             retry=NO_RETRY) as client:
            while not self._stop.is_set():
                try:
                    client.detect(self.images[self.answered % len(self.images)])
                    self.answered += 1
                except Exception as exc:  # noqa: BLE001 -- every failure is the finding
                    self.errors.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


@dataclass
class Installed:
    """An archive installed on the running site under traffic: what install printed and what the users saw."""

    code: int
    done: dict[str, Any]
    decision: dict[str, Any]
    traffic: Traffic
    seconds: float
    endpoints: dict[str, str]


def install_under_traffic(site_daemon: SiteDaemon, newer: Archive, scenes: list[bytes], *flags: str) -> Installed:
    endpoints = json.loads((stack.LocalStack(project=PROJECT).state / "endpoints.json").read_text())
    started = time.monotonic()
    with Traffic(endpoints, scenes) as traffic:
        installed = site_daemon.deploy("install", "--local", "--project", PROJECT, str(newer.path),
                                       "--rollout-flags", ROLLOUT_FLAGS, *flags)
    seconds = time.monotonic() - started
    assert installed.returncode in (0, 3), f"deploy install of {newer.path.name} failed: {installed.stderr[-3000:]}"
    done = json.loads(installed.stdout.strip().splitlines()[-1])
    decision = json.loads(Path(done["rollout"]["record"]).read_text())
    return Installed(installed.returncode, done, decision, traffic, seconds, endpoints)


def site_index(site_daemon: SiteDaemon) -> dict[str, Any]:
    """The version index the site's Triton serves."""
    triton = site_daemon.docker("ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}", "--filter",
                                "label=com.docker.compose.service=triton-cpu").stdout.strip()
    return dict(json.loads(site_daemon.docker("exec", triton, "cat", "/models/current/versions.json").stdout))


def test_a_newer_archive_on_the_running_site_is_rolled_out_beside_the_stable_version(
        archive: Archive, site_daemon: SiteDaemon, scenes: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> None:
    """A second archive (other settings: a new version's build key) installed on the site serving the first: the
    volume keeps version 1, the archive's builder (no network) adds version 2, the rollout service promotes it
    under traffic through the proxy with no failed request, and the site's files move to the new tag."""
    newer = make_archive(tmp_path_factory.mktemp("site-newer"), NEWER, "--set", "max_detections=200")
    frames = tmp_path_factory.mktemp("site-frames")  # the site's own images, unlabelled, for the agreement check
    for number, scene in enumerate(scenes):
        (frames / f"gate-{number}.jpg").write_bytes(scene)
    got = install_under_traffic(site_daemon, newer, scenes, "--control-images", str(frames))
    newer.path.unlink()  # installed (or not): the site daemon holds its images now
    assert got.code == 0
    control = got.decision["record"]["control"]
    assert (control["source"], control["images"], control["labelled"]) == ("user", len(scenes), False)
    assert (got.done["role"], got.done["rollout"]["action"], got.done["rollout"]["version"]) == ("candidate", "promote", 2)
    assert got.traffic.errors == [] and got.traffic.answered > 0, got.traffic.errors[:5]
    assert got.decision["tag"] == NEWER and got.decision["record"]["watch"]["action"] == "keep"
    assert json.loads((site.site_dir(PROJECT) / "site.json").read_text())["tag"] == NEWER
    index = site_index(site_daemon)
    assert (index["stable"], index["previous_stable"], index["versions"]["1"]["state"]) == (2, 1, "retired")
    with DetectionClient(got.endpoints["grpcs"], ca_cert=Path(got.endpoints["ca_cert"]), timeout_s=10) as client:
        assert sum(len(result) for result in client.detect_many(scenes)) > 0
    print(f"\nnewer archive on the running site: deploy archive {newer.make_s:.0f} s, deploy install with its "
          f"rollout {got.seconds:.0f} s ({got.decision['record'].get('deploy_update')}), {got.traffic.answered} "
          f"requests, {len(got.traffic.errors)} failed")


def test_a_worse_archive_on_the_running_site_is_rolled_back_by_itself_and_the_site_stays(
        site_daemon: SiteDaemon, scenes: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> None:
    """A third archive whose model keeps one detection an image (``max_detections=1``), installed on the site that
    the previous test moved to version 2: its builder adds version 3, the rollout judges it worse and rolls it back
    under traffic with no failed request, install exits 3 as ``deploy update`` does, and the site keeps serving
    version 2 from the files it had."""
    worse = make_archive(tmp_path_factory.mktemp("site-worse"), WORSE, "--set", "max_detections=1")
    got = install_under_traffic(site_daemon, worse, scenes)
    worse.path.unlink()  # installed (or not): the site daemon holds its images now
    assert got.code == 3  # as deploy update: rolled back
    assert (got.done["role"], got.done["rollout"]["action"], got.done["rollout"]["version"]) == ("candidate", "rollback", 3)
    assert got.traffic.errors == [] and got.traffic.answered > 0, got.traffic.errors[:5]
    assert got.decision["tag"] == WORSE and got.decision["record"]["failed"], got.decision["record"]
    assert json.loads((site.site_dir(PROJECT) / "site.json").read_text())["tag"] == NEWER  # the site's own files
    index = site_index(site_daemon)
    assert (index["stable"], index["versions"]["3"]["state"]) == (2, "rolled_back")
    with DetectionClient(got.endpoints["grpcs"], ca_cert=Path(got.endpoints["ca_cert"]), timeout_s=10) as client:
        assert max(len(result) for result in client.detect_many(scenes)) > 1  # version 2: more than one a scene
    print(f"\nworse archive on the running site: deploy archive {worse.make_s:.0f} s, deploy install with its "
          f"rollout {got.seconds:.0f} s, rolled back on {got.decision['record']['failed']}, {got.traffic.answered} "
          f"requests, {len(got.traffic.errors)} failed")


def test_the_next_up_runs_the_promoted_archives_images_and_keeps_the_stable_version(
        site_daemon: SiteDaemon, scenes: list[bytes]) -> None:
    """After the promotion (and the rolled-back third archive) the site's files name the promoted archive's tag
    while the running containers are still the first archive's: the next ``up`` recreates them from the promoted
    images, offline, and Triton serves version 2 again with nothing rebuilt."""
    started = time.monotonic()
    up = site_daemon.deploy("up", "--local", "--project", PROJECT, "--publish", "auto", "--no-pull",
                            "--build-network", "none")
    up_s = time.monotonic() - started
    assert up.returncode == 0, f"deploy up of the promoted site failed: {up.stderr[-3000:]}"
    endpoints = json.loads(up.stdout.strip().splitlines()[-1])
    triton = site_daemon.docker("ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}", "--filter",
                                "label=com.docker.compose.service=triton-cpu").stdout.strip()
    image = site_daemon.docker("inspect", "--format", "{{.Config.Image}}", triton).stdout.strip()
    assert image.endswith(f":{NEWER}"), image
    index = site_index(site_daemon)
    assert (index["stable"], index["versions"]["3"]["state"]) == (2, "rolled_back")
    with DetectionClient(endpoints["grpcs"], ca_cert=Path(endpoints["ca_cert"]), timeout_s=10) as client:
        found = [len(result) for result in client.detect_many(scenes)]
    assert max(found) > 1, found  # version 2, not the rolled-back one
    print(f"\nup after the promoted install: {up_s:.0f} s, Triton on {image}")
