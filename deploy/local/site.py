"""What a site archive is: its index, its members, the images it carries under its own tags, and no secrets.

``python -m deploy archive --local`` (site_archive.py) writes ``tde-site-<tag>.tar`` (or its numbered parts) on a
connected machine; ``python -m deploy install --local ARCHIVE`` (site_install.py) installs it on a machine with
no network. The format is the embedded server's offline archive's (generator/archive/indexed_tar.py), one reader
for both:

    tde-site.json        the index, first: format, machine, tag, images, repository, settings, every member's
                         size and sha256
    images/stack.tar     ``docker save`` of the stack's images, each under ``tde-site/<name>:<tag>``
    repository/<build>/  the repository the builder made from these images (its manifest.json among its files)
    compose/             the rendered compose file, its .env, the proxy's and Prometheus's configuration

Every image is saved under a tag of the archive's own, so a site holds the images of each archive it installed
side by side: a newer archive never moves a tag under a running container. Secrets never travel: the rendered
.env leaves them empty by design, the carried variables are a fixed list of image references, and the site makes
its own TLS key and admin token (or takes yours) when ``deploy up`` first runs there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from deploy.errors import LocalStackError
from deploy.local.stack import SITES_ROOT
from deploy.render.files import NGINX_CONF, OUTPUTS
from generator.archive.indexed_tar import IndexedTar

INDEX = "tde-site.json"
FORMAT = 1
KIND = "site"
IMAGES = "images/stack.tar"
SITE_REPO = "tde-site"
SETTINGS_FILE = "settings.yaml"
VOLUME = "model-repository-cpu"  # the CPU stack's models volume (deploy/docker-compose.yml)
_MEMBER = re.compile(r"^(images/[a-z0-9-]+\.tar|(repository|compose)(/[A-Za-z0-9._+-]+)+)$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

# The rendered files a started stack reads (compose binds them from its project directory), Grafana's included.
COMPOSE_FILES = (".env", "docker-compose.yml", NGINX_CONF, *(o.path for o in OUTPUTS if o.path.startswith("monitoring/")))
# The image variables of .env the site's compose reads from the archive; never anything else (no secrets).
BUILT_IMAGES = {"TRITON_CPU_IMAGE": "yolo-triton-cpu", "BUILDER_CPU_IMAGE": "yolo-builder-cpu"}
BASE_IMAGES = {"NGINX_IMAGE": "nginx", "PROMETHEUS_IMAGE": "prometheus"}
CARRIED_VARIABLES = (*BUILT_IMAGES, "CPU_IMAGE_TAG", *BASE_IMAGES)


class SiteArchiveError(LocalStackError):
    """A site archive cannot be made, or is refused; the message names the archive and the problem."""


def refusal(archive: str, problem: str) -> SiteArchiveError:
    return SiteArchiveError(f"refusing the archive {archive}: {problem}; nothing was loaded")


READER = IndexedTar(INDEX, FORMAT, _MEMBER.match, "python -m deploy archive", refusal)


def check_tag(tag: str) -> str:
    if not _TAG.match(tag):
        raise SiteArchiveError(f"--tag {tag!r} is not a Docker tag (letters, digits, _ . -; at most 128)")
    return tag


def site_variables(tag: str) -> dict[str, str]:
    """The .env variables that point the site's compose at the archive's images."""
    return {**{variable: f"{SITE_REPO}/{name}" for variable, name in BUILT_IMAGES.items()}, "CPU_IMAGE_TAG": tag,
            **{variable: f"{SITE_REPO}/{name}:{tag}" for variable, name in BASE_IMAGES.items()}}


def site_refs(variables: Mapping[str, str]) -> list[str]:
    """Every image reference the site's variables name."""
    built = [f"{variables[v]}:{variables['CPU_IMAGE_TAG']}" for v in BUILT_IMAGES]
    return [*built, *(variables[v] for v in BASE_IMAGES)]


def carried(variables: Mapping[str, str]) -> dict[str, str]:
    """The image variables, exactly: any other key (a secret, a path of the maker's machine) is an error."""
    if set(variables) != set(CARRIED_VARIABLES) or not all(
            value.startswith(f"{SITE_REPO}/") for key, value in variables.items() if key != "CPU_IMAGE_TAG"):
        raise SiteArchiveError(f"the site variables must be exactly {', '.join(CARRIED_VARIABLES)}, images of "
                               f"{SITE_REPO}/")
    return dict(variables)


def site_dir(project: str) -> Path:
    return SITES_ROOT / project


def volume_name(project: str) -> str:
    return f"{project}_{VOLUME}"
