"""The CPU stack for linux/arm64, proven on an amd64 machine under emulation (marker ``emulated``, its own lane).

What this proves: the slim CPU Triton image, the builder and the proxy build for arm64 from the same Dockerfiles,
on arm64 bases made here, with the aarch64 wheels (tritonserver and onnxruntime: their ELF headers are read); an
arm64 site archive records its platform and installs on an empty daemon with no network (every image
linux/arm64). The archive carries the repository the amd64 builder made (the same bytes on both architectures:
deploy/local/site_archive.py), so ``generator build`` is not run under emulation.

Then the installed site starts offline under emulation (every container arm64, the proxy and Triton healthy) and
answers four scenes over HTTPS and gRPC through its proxy with the detections this machine's amd64 Triton 2.51 gets
from the same repository bytes (copied out of the arm64 container): the same classes in the same order, boxes
within 1 px, scores within 0.01. Two things are the lane's own, for emulation only: an aarch64 /proc/cpuinfo
mounted into Triton's container where the emulator shows the host's x86 one (Debian 12's qemu 7.2: onnxruntime
1.32's aarch64 extension dies with SIGSEGV on import otherwise; tests/deploy/emulated/cpuinfo.py), and the
site's probe timeouts and queue budget set for emulation's speed (``EMULATED_TIMING``). Emulation can never prove
speed (10-20x slower than an arm64 machine), nor the kernel and libc of a real arm64 host.

The lane needs the arm64 interpreter registered (.ci/run: Debian's qemu-user-static and binfmt-support) and the
arm64 images (.ci/run builds them before the lane, layer-cached). Without the interpreter the module is skipped with
the reason, unless ``TDE_REQUIRE_EMULATION=1``, where that is a failure.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients import DetectionClient, DetectionResult
from deploy.local import platforms, site
from deploy.settings import Settings
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from tests.deploy.emulated import cpuinfo
from tests.deploy.live.conftest import _no_engine, docker
from tests.deploy.live.conftest import scenes as scenes  # the live lane's four scenes, a fixture here too
from tests.deploy.live.site_daemon import SiteDaemon, make_site_archive, running_site_daemon

pytestmark = [pytest.mark.emulated]

PID = os.getpid()
PROJECT = f"tde-emu-site-{PID}"
MAKER = f"tde-emu-make-{PID}"
TAG = f"emu-arm64-{PID}"
ARM64 = platforms.parse("linux/arm64")
# Emulation's timing, the only settings the emulated site does not take as shipped: every instruction translated,
# one 640 image takes the detector seconds, not tens of milliseconds. The health probe's 5 s would fail every probe
# (the watchdog then restarts a server that only is slow), and the queue budget the amd64 build derives from its own
# service time would shed a request that waits behind one probe. Both are settings a slow real host may need too.
EMULATED_TIMING = ("--set", "probe_timeout_s=60", "--set", "probe_interval_s=90", "--set", "max_queue_ms=120000")
EMULATED_TIMEOUT_S = 120  # a client's request (its default is 10 s)
ELF_AARCH64 = 183  # e_machine of an aarch64 ELF file
# The ELF machine of a file inside a container, read by its own (emulated) Python.
ELF_MACHINE = "import struct, sys; print(struct.unpack_from('<H', open(sys.argv[1], 'rb').read(20), 18)[0])"


def _emulation_or_skip() -> None:
    reason = _no_engine()
    if reason is None and not platforms.emulation_registered(ARM64):
        reason = platforms.why_not_runnable(ARM64, platforms.parse("linux/amd64"))
    if reason is not None:
        if os.environ.get("TDE_REQUIRE_EMULATION") == "1":
            pytest.fail(f"the emulated lane needs Docker and the arm64 interpreter: {reason}")
        pytest.skip(f"no arm64 emulation for the emulated lane: {reason}")


@dataclass
class Archive:
    path: Path
    index: dict[str, Any]
    make_s: float
    install_s: float = 0.0


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    """``deploy archive --local --platform linux/arm64``: bases, images (emulated builds), the saved archive (removed
    at the end: 1.7 GiB)."""
    _emulation_or_skip()
    out = tmp_path_factory.mktemp("arm64-site")
    made = Archive(*make_site_archive(out, MAKER, TAG, "--platform", "linux/arm64", *EMULATED_TIMING))
    try:
        yield made
    finally:
        for path in out.iterdir():
            path.unlink()


@pytest.fixture(scope="module")
def site_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteDaemon]:
    _emulation_or_skip()
    log = tmp_path_factory.mktemp("site-daemon") / "dockerd.log"
    with running_site_daemon(f"tde-emu-{PID}", log, PROJECT, {}) as handle:
        yield handle


def docker_here(*args: str) -> str:
    """``docker ARGS`` on this machine's daemon, its output."""
    return docker(*args).stdout.strip()


def elf_machine(daemon: SiteDaemon, image: str, path: str) -> int:
    found = daemon.docker("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c",
                          f"python3 -c \"{ELF_MACHINE}\" $(readlink -f {path})")
    return int(found.stdout.strip())


def test_the_arm64_archive_carries_arm64_images_and_records_its_platform(archive: Archive) -> None:
    assert (archive.index["platform"], archive.index["machine"]) == ("linux/arm64", "aarch64")
    assert archive.index["repository"]["build"] == "versions"
    for image in archive.index["images"]:  # the source images: tags of this machine, the arm64 ones
        assert image["id"].startswith("sha256:")
    for name in ("yolo-triton-cpu", "yolo-builder-cpu"):
        ref = f"{name}:{Settings().cpu_image_tag}-arm64"
        assert docker_here("image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", ref) == "linux/arm64", ref


def test_the_arm64_archive_installs_on_an_empty_daemon_with_aarch64_binaries(
        archive: Archive, site_daemon: SiteDaemon) -> None:
    assert site_daemon.images() == []
    started = time.monotonic()
    installed = site_daemon.deploy("install", "--local", "--project", PROJECT, str(archive.path))
    archive.install_s = time.monotonic() - started
    assert installed.returncode == 0, f"deploy install failed: {installed.stderr[-3000:]}"
    assert json.loads(installed.stdout.strip().splitlines()[-1])["role"] == "stable"
    assert "run emulated on this linux/amd64 daemon" in installed.stderr
    refs = [image["ref"] for image in archive.index["images"]]
    assert sorted(site_daemon.images()) == sorted(refs)
    for ref in refs:
        assert site_daemon.docker("image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", ref).stdout.strip() \
            == "linux/arm64", ref
    triton = f"tde-site/yolo-triton-cpu:{TAG}"
    assert elf_machine(site_daemon, triton, "/opt/tritonserver/bin/tritonserver") == ELF_AARCH64
    ort = "/opt/tde/stub/lib/python3.11/site-packages/onnxruntime/capi/onnxruntime_pybind11_state*.so"
    assert elf_machine(site_daemon, triton, ort) == ELF_AARCH64
    print(f"\narm64 site archive: {archive.path.stat().st_size / 2**20:.0f} MiB; deploy archive {archive.make_s:.0f} s,"
          f" install on an empty daemon {archive.install_s:.0f} s")


def site_triton(daemon: SiteDaemon) -> str:
    return daemon.docker("ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}", "--filter",
                         "label=com.docker.compose.service=triton-cpu").stdout.strip()


def amd64_detections(daemon: SiteDaemon, folder: Path, images: list[bytes]) -> list[DetectionResult]:
    """The same repository bytes the arm64 Triton serves (copied out of its container), served by this machine's
    embedded Triton 2.51 (amd64): its detections of ``images``."""
    repository = folder / "repository"
    daemon.docker("cp", "-L", f"{site_triton(daemon)}:/models/current", str(repository))
    server = EmbeddedServer(repository, free_port(), free_port(), free_port(), log_file=folder / "tritonserver.log",
                            load_models=("yolo",))
    with server, DetectionClient(server.grpc_url) as client:
        return client.detect_many(images)


def assert_same_detections(got: DetectionResult, want: DetectionResult, what: str) -> tuple[float, float]:
    """The same classes in the same order (the server's: best score first), boxes within 1 px, scores within 0.01
    (two architectures' float kernels differ in their last bits, never by a pixel); the largest differences."""
    assert got.class_ids.tolist() == want.class_ids.tolist(), f"{what}: classes {got.class_ids} != {want.class_ids}"
    box_px = float(abs(got.boxes - want.boxes).max(initial=0.0))
    score = float(abs(got.scores - want.scores).max(initial=0.0))
    assert box_px <= 1.0 and score <= 0.01, f"{what}: boxes differ by {box_px:.2f} px, scores by {score:.4f}"
    return box_px, score


def test_the_arm64_site_serves_through_its_proxy_what_the_amd64_triton_detects(
        site_daemon: SiteDaemon, scenes: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> None:
    """The installed arm64 site started offline under emulation (every container arm64): images over HTTPS and
    gRPC through its proxy get the detections this machine's amd64 Triton gets from the same repository."""
    triton_image = f"tde-site/yolo-triton-cpu:{TAG}"
    shown = site_daemon.docker("run", "--rm", "--network", "none", "--entrypoint", "cat", triton_image,
                               cpuinfo.TARGET).stdout
    mounted = not cpuinfo.shows_aarch64(shown)
    if mounted:  # the emulator shows the host's x86 cpuinfo: the lane's own workaround (tests/deploy/emulated/cpuinfo.py)
        fake = cpuinfo.write_aarch64_cpuinfo(tmp_path_factory.mktemp("cpuinfo") / "cpuinfo")
        cpuinfo.mount_into(site.site_dir(PROJECT) / "docker-compose.yml", "triton-cpu", fake)
    started = time.monotonic()
    up = site_daemon.deploy("up", "--local", "--project", PROJECT, "--publish", "auto", "--no-pull",
                            "--build-network", "none")
    up_s = time.monotonic() - started
    assert up.returncode == 0, f"deploy up of the arm64 site failed: {up.stderr[-3000:]}"
    endpoints = json.loads(up.stdout.strip().splitlines()[-1])
    for service in ("triton-cpu", "proxy"):
        container = site_daemon.docker("ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}",
                                       "--filter", f"label=com.docker.compose.service={service}").stdout.strip()
        image = site_daemon.docker("inspect", "--format", "{{.Image}}", container).stdout.strip()
        assert site_daemon.docker("image", "inspect", "--format", "{{.Architecture}}", image).stdout.strip() \
            == "arm64", service
    started = time.monotonic()
    served = {}
    for protocol in ("https", "grpcs"):
        with DetectionClient(endpoints[protocol], ca_cert=Path(endpoints["ca_cert"]), timeout_s=EMULATED_TIMEOUT_S
                             ) as client:
            served[protocol] = client.detect_many(scenes)
    serve_s = time.monotonic() - started
    want = amd64_detections(site_daemon, tmp_path_factory.mktemp("amd64"), scenes)
    assert sum(len(result) for result in want) > 0
    differences = [assert_same_detections(got, expected, f"scene {number} over {protocol}")
                   for protocol, results in served.items()
                   for number, (got, expected) in enumerate(zip(results, want, strict=True))]
    print(f"\narm64 site under emulation: deploy up {up_s:.0f} s (aarch64 cpuinfo mounted: {mounted}), "
          f"{len(scenes)} scenes over HTTPS and gRPC {serve_s:.0f} s, {sum(len(r) for r in want)} detections as the "
          f"amd64 Triton's: boxes within {max(d[0] for d in differences):.3f} px, scores within "
          f"{max(d[1] for d in differences):.5f}")
