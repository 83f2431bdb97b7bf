"""Base images where no registry answers: Debian from Debian's packages, and stand-ins built on it.

Every base image is a setting pinned by tag and digest (deploy/settings.py). ``resolve_bases`` keeps a pinned
image that is here or can be pulled; otherwise it makes a local one, once per machine:

* ``DEBIAN_IMAGE``: ``debootstrap --variant=minbase`` of the same suite, slimmed like Debian's ``-slim`` images
  (no documentation, manuals or translations), then ``docker import``;
* ``PYTHON_IMAGE``, ``NGINX_IMAGE``, ``PROMETHEUS_IMAGE``: Debian's python3, nginx and prometheus packages on that
  base (deploy/docker/local/*.Dockerfile, rendered like every other file).

They are tagged ``tde-local/<name>:<suite>-<architecture>`` (``bookworm-amd64``, ``bookworm-arm64``: the bases of
both architectures coexist, deploy/local/platforms.py) and carry a label with the digest of their recipe, so a
changed recipe makes them again and an unchanged one is reused. Another architecture's Debian is made by
``debootstrap --arch`` through the kernel's emulation of it (qemu-user-static), its stand-ins by ``docker build
--platform``. The Dockerfiles and compose read the same variables the settings
render into .env; ``python -m deploy up --local`` points those at the local tags for its own run. Grafana has
no stand-in: no registry reachable here carries it, so the local stack runs without it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from deploy.errors import LocalStackError
from deploy.local import docker
from deploy.local.platforms import Platform, why_not_runnable
from deploy.settings import Settings

logger = logging.getLogger(__name__)

LOCAL_REPO = "tde-local"
RECIPE_LABEL = "org.triton-detection-ensemble.recipe"
# The suite of the pinned debian_image (bookworm: its Python 3.11 runs the wheel's 3.11 backend stub).
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
LOCAL_DOCKERFILES = Path(__file__).resolve().parents[1] / "docker" / "local"
PULL_TIMEOUT_S = 300.0
BUILD_TIMEOUT_S = 1800.0

# What Debian's -slim images leave out, for every later apt install too (dpkg path-exclude), plus apt settings
# that keep no package cache in an image layer.
_DPKG_SLIM = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
"""
_APT_SLIM = """\
APT::Install-Recommends "false";
Acquire::Languages "none";
Binary::apt::APT::Keep-Downloaded-Packages "false";
"""
_SOURCES = """\
Types: deb
URIs: {mirror}
Suites: {suite} {suite}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: {suite}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


@dataclass(frozen=True)
class Base:
    """One base image: its setting, the .env variable the Dockerfiles and compose read, its local stand-in."""

    setting: str
    variable: str
    name: str  # tde-local/<name>:<tag>-<architecture>
    tag: str
    dockerfile: str  # under deploy/docker/local/; "" for the Debian base itself

    def local(self, platform: Platform) -> str:
        """The local stand-in's reference for ``platform``."""
        return f"{LOCAL_REPO}/{self.name}:{self.tag}-{platform.debian}"

    def recipe_text(self, platform: Platform) -> str:
        if not self.dockerfile:
            return (f"debootstrap minbase --arch {platform.debian} {DEBIAN_SUITE} {DEBIAN_MIRROR}\n"
                    f"{_DPKG_SLIM}{_APT_SLIM}{_SOURCES}")
        return f"{platform.docker}\n" + (LOCAL_DOCKERFILES / self.dockerfile).read_text(encoding="utf-8")


DEBIAN = Base("debian_image", "DEBIAN_IMAGE", "debian", DEBIAN_SUITE, "")
BASES = (
    DEBIAN,
    Base("python_image", "PYTHON_IMAGE", "python", f"3.11-{DEBIAN_SUITE}", "python.Dockerfile"),
    Base("nginx_image", "NGINX_IMAGE", "nginx", DEBIAN_SUITE, "nginx.Dockerfile"),
    Base("prometheus_image", "PROMETHEUS_IMAGE", "prometheus", DEBIAN_SUITE, "prometheus.Dockerfile"),
)


def _recipe(base: Base, platform: Platform, debian_id: str = "") -> str:
    """Digest of what makes ``base``: its recipe text and, for a stand-in, the Debian image it starts from."""
    return hashlib.sha256(f"{base.recipe_text(platform)}\n{debian_id}".encode()).hexdigest()


def image_architecture(image: str) -> str | None:
    """The architecture a local image was built for (Debian's name: amd64, arm64); None when it is not here."""
    result = docker.run(["image", "inspect", "--format", "{{.Architecture}}", image], check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def pinned_available(image: str, pull: bool, platform: Platform) -> bool:
    """The pinned image is here for ``platform``, or (``pull``) a registry hands that architecture over."""
    if image_architecture(image) == platform.debian:
        return True
    if not pull:
        return False
    result = docker.run(["pull", "--quiet", "--platform", platform.docker, image], timeout_s=PULL_TIMEOUT_S,
                        check=False)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no answer"]
        logger.info("cannot pull %s (%s); making a local stand-in", image, said[0])
    return result.returncode == 0


def make_debian(platform: Platform, force: bool = False) -> str:
    """The local Debian base of ``platform`` (debootstrap + docker import), made unless one of this recipe is here."""
    local, recipe = DEBIAN.local(platform), _recipe(DEBIAN, platform)
    if not force and docker.image_label(local, RECIPE_LABEL) == recipe:
        logger.info("reusing %s", local)
        return local
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise LocalStackError(
            f"no registry hands out {DEBIAN.setting} and making {local} needs root and debootstrap: "
            "run `apt-get install debootstrap` and `python -m deploy bases --local` as root once on this machine"
        )
    with tempfile.TemporaryDirectory(prefix="tde-debian-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        logger.info("making %s: debootstrap --arch %s %s from %s (a minute natively, minutes emulated)", local,
                    platform.debian, DEBIAN_SUITE, DEBIAN_MIRROR)
        result = subprocess.run(["debootstrap", "--variant=minbase", f"--arch={platform.debian}", DEBIAN_SUITE,
                                 str(root), DEBIAN_MIRROR], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LocalStackError(f"debootstrap {DEBIAN_SUITE} ({platform.debian}) failed: "
                                  f"{(result.stderr or result.stdout)[-600:]}")
        _slim(root)
        _import(root, local, recipe, platform)
    return local


def _import(root: Path, local: str, recipe: str, platform: Platform) -> None:
    """``docker import`` of a root folder as ``local``, labelled with its recipe, for ``platform``."""
    tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    try:
        imported = subprocess.run(
            ["docker", "import", "--platform", platform.docker, "--change", 'CMD ["bash"]',
             "--change", f"LABEL {RECIPE_LABEL}={recipe}", "-", local],
            stdin=tar.stdout, capture_output=True, text=True, check=False)
    finally:
        if tar.stdout is not None:
            tar.stdout.close()
        tar.wait()
    if imported.returncode != 0 or tar.returncode != 0:
        raise LocalStackError(f"docker import of the Debian root failed: {imported.stderr.strip()[-400:]}")


def _slim(root: Path) -> None:
    """What Debian's -slim images do: no docs, manuals or translations now or in later installs; no apt cache."""
    (root / "etc/dpkg/dpkg.cfg.d/slim").write_text(_DPKG_SLIM)
    (root / "etc/apt/apt.conf.d/slim").write_text(_APT_SLIM)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(_SOURCES.format(mirror=DEBIAN_MIRROR,
                                                                                  suite=DEBIAN_SUITE))
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*",
                    "usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*"):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.name != "lock":
                path.unlink()


def make_standin(base: Base, debian: str, platform: Platform, build_network: str, force: bool = False) -> str:
    """A stand-in built for ``platform`` from its local Dockerfile on ``debian``, unless one of this recipe is here."""
    local, recipe = base.local(platform), _recipe(base, platform, docker.require_image_id(debian))
    if not force and docker.image_label(local, RECIPE_LABEL) == recipe:
        logger.info("reusing %s", local)
        return local
    logger.info("making %s from %s", local, base.dockerfile)
    docker.run(["build", "--quiet", "--platform", platform.docker, "--network", build_network, "--build-arg",
                f"DEBIAN_IMAGE={debian}", "--label", f"{RECIPE_LABEL}={recipe}", "-t", local, "-f",
                str(LOCAL_DOCKERFILES / base.dockerfile), str(LOCAL_DOCKERFILES)], timeout_s=BUILD_TIMEOUT_S)
    return local


def resolve_bases(settings: Settings, platform: Platform, *, pull: bool = True, build_network: str = "host",
                  force: bool = False, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """.env variable -> the image to use for ``platform``: the pinned one where it is here for that architecture or
    pulls, else the local stand-in (none for the variables in ``skip``). Another architecture than the daemon's
    needs its emulation registered."""
    from deploy.local.platforms import daemon_platform

    reason = why_not_runnable(platform, daemon_platform())
    if reason is not None:
        raise LocalStackError(f"cannot build images for {platform.docker} here: {reason}")
    chosen: dict[str, str] = {}
    debian = ""
    for base in (b for b in BASES if b.variable not in skip):
        pinned = str(getattr(settings, base.setting))
        if not force and pinned_available(pinned, pull, platform):
            chosen[base.variable] = pinned
            continue
        if base is DEBIAN:
            debian = make_debian(platform, force)
            chosen[base.variable] = debian
        else:
            debian = debian or chosen[DEBIAN.variable]
            chosen[base.variable] = make_standin(base, debian, platform, build_network, force)
    return chosen
