"""The CPU stack for linux/arm64, proven on an amd64 machine under emulation (marker ``emulated``, its own lane).

What this proves: the slim CPU Triton image, the builder and the proxy build for arm64 from the same Dockerfiles,
on arm64 bases made here, with the aarch64 wheels (tritonserver and onnxruntime: their ELF headers are read); an
arm64 site archive records its platform and installs on an empty daemon with no network (every image
linux/arm64). The archive carries the repository the amd64 builder made (the same bytes on both architectures:
deploy/local/site_archive.py), so ``generator build`` is not run under emulation.

What it does not prove yet: the arm64 stack serving. Started under emulation (Debian 12's qemu-user-static 7.2),
onnxruntime 1.32's aarch64 extension dies with SIGSEGV on import, so the detector's stubs never come up (open:
deploy/README.md, "Another architecture"; the proxy's nginx refused its maps there too, fixed since, not yet seen
starting under emulation). Emulation can never prove
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

from deploy.local import platforms
from deploy.settings import Settings
from tests.deploy.live.conftest import _no_engine, docker
from tests.deploy.live.site_daemon import SiteDaemon, make_site_archive, running_site_daemon

pytestmark = [pytest.mark.emulated]

PID = os.getpid()
PROJECT = f"tde-emu-site-{PID}"
MAKER = f"tde-emu-make-{PID}"
TAG = f"emu-arm64-{PID}"
ARM64 = platforms.parse("linux/arm64")
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
    """``deploy archive --local --platform linux/arm64``: bases, images (emulated builds), the saved archive
    (removed at the end: 1.7 GB on the disk every lane shares)."""
    _emulation_or_skip()
    out = tmp_path_factory.mktemp("arm64-site")
    made = Archive(*make_site_archive(out, MAKER, TAG, "--platform", "linux/arm64"))
    yield made
    made.path.unlink(missing_ok=True)


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
