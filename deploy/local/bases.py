"""Base images where no registry answers: Debian from Debian's packages, and stand-ins built on it.

Every base image is a setting pinned by tag and digest (deploy/settings.py). ``resolve_bases`` keeps a pinned
image that is here or can be pulled; otherwise it makes a local one, once per machine:

* ``DEBIAN_IMAGE``: ``debootstrap --variant=minbase`` of the same suite, slimmed like Debian's ``-slim`` images
  (no documentation, manuals or translations), then ``docker import``;
* ``PYTHON_IMAGE``, ``NGINX_IMAGE``, ``PROMETHEUS_IMAGE``: Debian's python3, nginx and prometheus packages on that
  base (deploy/docker/local/*.Dockerfile, rendered like every other file).

They are tagged ``tde-local/...`` and carry a label with the digest of their recipe, so a changed recipe makes
them again and an unchanged one is reused. The Dockerfiles and compose read the same variables the settings
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
    local: str
    dockerfile: str  # under deploy/docker/local/; "" for the Debian base itself

    @property
    def recipe_text(self) -> str:
        if not self.dockerfile:
            return f"debootstrap minbase {DEBIAN_SUITE} {DEBIAN_MIRROR}\n{_DPKG_SLIM}{_APT_SLIM}{_SOURCES}"
        return (LOCAL_DOCKERFILES / self.dockerfile).read_text(encoding="utf-8")


DEBIAN = Base("debian_image", "DEBIAN_IMAGE", f"{LOCAL_REPO}/debian:{DEBIAN_SUITE}", "")
BASES = (
    DEBIAN,
    Base("python_image", "PYTHON_IMAGE", f"{LOCAL_REPO}/python:3.11-{DEBIAN_SUITE}", "python.Dockerfile"),
    Base("nginx_image", "NGINX_IMAGE", f"{LOCAL_REPO}/nginx:{DEBIAN_SUITE}", "nginx.Dockerfile"),
    Base("prometheus_image", "PROMETHEUS_IMAGE", f"{LOCAL_REPO}/prometheus:{DEBIAN_SUITE}", "prometheus.Dockerfile"),
)


def _recipe(base: Base, debian_id: str = "") -> str:
    """Digest of what makes ``base``: its recipe text and, for a stand-in, the Debian image it starts from."""
    return hashlib.sha256(f"{base.recipe_text}\n{debian_id}".encode()).hexdigest()


def pinned_available(image: str, pull: bool) -> bool:
    """The pinned image is here, or (``pull``) a registry hands it over."""
    if docker.has_image(image):
        return True
    if not pull:
        return False
    result = docker.run(["pull", "--quiet", image], timeout_s=PULL_TIMEOUT_S, check=False)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no answer"]
        logger.info("cannot pull %s (%s); making a local stand-in", image, said[0])
    return result.returncode == 0


def _image_id(image: str) -> str:
    return docker.run(["image", "inspect", "--format", "{{.Id}}", image]).stdout.strip()


def make_debian(force: bool = False) -> str:
    """The local Debian base (debootstrap + docker import), made unless one of this recipe is here."""
    recipe = _recipe(DEBIAN)
    if not force and docker.image_label(DEBIAN.local, RECIPE_LABEL) == recipe:
        logger.info("reusing %s", DEBIAN.local)
        return DEBIAN.local
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise LocalStackError(
            f"no registry hands out {DEBIAN.setting} and making {DEBIAN.local} needs root and debootstrap: "
            "run `apt-get install debootstrap` and `python -m deploy bases --local` as root once on this machine"
        )
    with tempfile.TemporaryDirectory(prefix="tde-debian-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        logger.info("making %s: debootstrap %s from %s (about a minute)", DEBIAN.local, DEBIAN_SUITE, DEBIAN_MIRROR)
        result = subprocess.run(["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(root), DEBIAN_MIRROR],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LocalStackError(f"debootstrap {DEBIAN_SUITE} failed: {(result.stderr or result.stdout)[-600:]}")
        _slim(root)
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run(
                ["docker", "import", "--change", 'CMD ["bash"]', "--change", f"LABEL {RECIPE_LABEL}={recipe}",
                 "-", DEBIAN.local], stdin=tar.stdout, capture_output=True, text=True, check=False)
        finally:
            if tar.stdout is not None:
                tar.stdout.close()
            tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise LocalStackError(f"docker import of the Debian root failed: {imported.stderr.strip()[-400:]}")
    return DEBIAN.local


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


def make_standin(base: Base, debian: str, build_network: str, force: bool = False) -> str:
    """A stand-in built from its local Dockerfile on ``debian``, unless one of this recipe is here."""
    recipe = _recipe(base, _image_id(debian))
    if not force and docker.image_label(base.local, RECIPE_LABEL) == recipe:
        logger.info("reusing %s", base.local)
        return base.local
    logger.info("making %s from %s", base.local, base.dockerfile)
    docker.run(["build", "--quiet", "--network", build_network, "--build-arg", f"DEBIAN_IMAGE={debian}",
                "--label", f"{RECIPE_LABEL}={recipe}", "-t", base.local, "-f",
                str(LOCAL_DOCKERFILES / base.dockerfile), str(LOCAL_DOCKERFILES)], timeout_s=BUILD_TIMEOUT_S)
    return base.local


def resolve_bases(settings: Settings, *, pull: bool = True, build_network: str = "host",
                  force: bool = False) -> dict[str, str]:
    """.env variable -> the image to use: the pinned one where it is here or pulls, else the local stand-in."""
    chosen: dict[str, str] = {}
    debian = ""
    for base in BASES:
        pinned = str(getattr(settings, base.setting))
        if not force and pinned_available(pinned, pull):
            chosen[base.variable] = pinned
            continue
        if base is DEBIAN:
            debian = make_debian(force)
            chosen[base.variable] = debian
        else:
            debian = debian or chosen[DEBIAN.variable]
            chosen[base.variable] = make_standin(base, debian, build_network, force)
    return chosen
