"""The architectures the CPU stack builds for, and whether this machine's daemon can run one.

A platform is named as Docker names it (``linux/amd64``, ``linux/arm64``); Debian calls the same architectures
``amd64``/``arm64`` (debootstrap ``--arch``, image tags) and the kernel ``x86_64``/``aarch64`` (``uname -m``, the
embedded server's wheel). A daemon runs images of its own architecture, and of another one where the kernel has
that architecture's interpreter registered with ``binfmt_misc`` (Debian's qemu-user-static and binfmt-support,
flag ``F`` so that it works inside containers): slow, but the same images and the same path (docs/BUILDING.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deploy.errors import LocalStackError
from deploy.local import docker

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


@dataclass(frozen=True)
class Platform:
    """One architecture under its three names."""

    docker: str  # linux/arm64: docker --platform, DOCKER_DEFAULT_PLATFORM
    debian: str  # arm64: debootstrap --arch, the local images' tags
    machine: str  # aarch64: uname -m, docker info's Architecture

    @property
    def qemu(self) -> str:
        """The binfmt_misc entry Debian's qemu-user-static registers for it."""
        return f"qemu-{self.machine}"


PLATFORMS = (Platform("linux/amd64", "amd64", "x86_64"), Platform("linux/arm64", "arm64", "aarch64"))


def parse(value: str) -> Platform:
    """``linux/arm64`` (also ``arm64``, ``aarch64``, ``linux/arm64/v8``) -> its Platform; one-line error otherwise."""
    wanted = value.strip().lower().removesuffix("/v8")
    for known in PLATFORMS:
        if wanted in (known.docker, known.debian, known.machine):
            return known
    raise LocalStackError(f"unknown platform {value!r}: the CPU stack builds for "
                          f"{', '.join(p.docker for p in PLATFORMS)}")


def by_machine(machine: str) -> Platform:
    return parse(machine)


def daemon_platform() -> Platform:
    """The architecture of the Docker daemon's host (docker info), which is what its containers run natively."""
    answer = docker.run(["info", "--format", "{{.Architecture}}"]).stdout.strip()
    return parse(answer)


def emulation_registered(target: Platform, binfmt: Path | None = None) -> bool:
    """The kernel runs ``target``'s binaries through a registered, enabled interpreter."""
    entry = (binfmt or BINFMT_DIR) / target.qemu
    try:
        return entry.read_text(encoding="utf-8").splitlines()[:1] == ["enabled"]
    except OSError:
        return False


def why_not_runnable(target: Platform, daemon: Platform, binfmt: Path | None = None) -> str | None:
    """None where the daemon runs ``target``'s images (natively or emulated); else the reason, one line."""
    if target == daemon or emulation_registered(target, binfmt):
        return None
    return (f"this Docker daemon runs {daemon.docker} and no {target.machine} emulation is registered "
            "(apt-get install qemu-user-static binfmt-support; docs/BUILDING.md, \"Another architecture\")")
