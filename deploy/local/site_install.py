"""``python -m deploy install --local ARCHIVE``: a site archive installed on a machine with no network.

Everything is checked before anything is loaded: every part there and whole (and its sha256 the one the
archive's ``.sha256`` listing gives, where that is beside it), the index first and of this kind
and machine, every member listed with its size and sha256 (generator/server/indexed_tar.py, the reader the
embedded server's archive uses too), nothing unlisted, nothing missing, and ``docker save``'s own manifest naming
every image with every layer it needs. A refusal names the archive and the problem and loads nothing. Then:

1. ``docker load`` of the images, each checked to carry the image id the index recorded;
2. the repository copied into the project's models volume (made with compose's labels where it is not there yet)
   by the builder image, with no network: staged in a hidden folder, renamed into place; a folder of that name
   already there is kept, and must equal the archive's; the volume's own top-level files that travel with it (the
   builder's record of what it built) are put where the volume has none;
3. where the volume has no ``current`` yet (a new site), ``current`` points at it and the rendered files, the
   image variables and the settings go to ``deploy/.local/.sites/<project>/``: ``deploy up --local`` then
   starts the stack from them, building nothing and pulling nothing. Where ``current`` points at another build
   (a running site), the new build is a candidate beside it and the site's files stay (``offer_candidate``).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from deploy.local import docker
from deploy.local.engine import check_engine
from deploy.local.site import (
    FORMAT,
    IMAGES,
    KIND,
    READER,
    SETTINGS_FILE,
    VOLUME,
    SiteArchiveError,
    carried,
    check_tag,
    refusal,
    site_dir,
    site_refs,
    site_variables,
    volume_name,
)
from deploy.local.site_archive import check_saved
from deploy.local.stack import SITE_ENV, SITES_ROOT
from generator.errors import ServerError
from generator.server.archive_parts import check_checksums, find_parts

logger = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 1800.0
SITE_INDEX = "site.json"  # the installed archive's index (without its file list), beside the rendered files
CANDIDATE = "candidate.json"
# Run by the builder image as its own user, no network: stage, rename into place, link `current` where none is.
PLACE = r"""set -e
b="$1"; cd "$2"; s=".$b.site"
rm -rf "$s"; mkdir "$s"; tar -x -C "$s"
if [ ! -e "$b" ]; then mv "$s/$b" "$b"; elif ! diff -r -q "$s/$b" "$b" >/dev/null; then rm -rf "$s"; echo differs; exit 0; fi
for f in "$s"/*; do n="${f##*/}"; if [ -f "$f" ] && [ ! -e "$n" ]; then mv "$f" "$n"; fi; done
rm -rf "$s"
if [ ! -e current ] && [ ! -L current ]; then ln -s "$b" .current.tmp-site; mv -T .current.tmp-site current; fi
if [ "$(readlink current)" = "$b" ]; then echo stable; else echo candidate; fi
"""


def check_index(index: dict[str, Any], name: str) -> None:
    """Refuse an index that is not a site archive for this machine, before a member is read."""
    if index.get("kind") != KIND:
        raise refusal(name, f"it is not a site archive (kind {index.get('kind')!r}); python -m generator serve "
                            "--prepare --from-archive installs the embedded server's")
    if index.get("machine") != platform.machine():
        raise refusal(name, f"its images are for {index.get('machine')}, this machine is {platform.machine()}")
    try:
        tag = check_tag(str(index.get("tag")))
        variables = carried(index.get("variables") or {})
    except SiteArchiveError as exc:
        raise refusal(name, str(exc)) from None
    if variables != site_variables(tag) or [i.get("ref") for i in index.get("images", [])] != site_refs(variables):
        raise refusal(name, f"its images are not the stack's under {tag}")
    repository = index.get("repository") or {}
    build = str(repository.get("build", ""))
    if not build or "/" in build or build.startswith(".") or not any(
            n.startswith(f"repository/{build}/") for n in index["files"]):
        raise refusal(name, f"its repository {build!r} is not a folder it carries")
    for file in repository.get("volume_files", []):
        if "/" in str(file) or str(file).startswith(".") or f"repository/{file}" not in index["files"]:
            raise refusal(name, f"its volume file {file!r} is not a file it carries")


def _check_images(root: Path, index: dict[str, Any], name: str) -> None:
    try:
        saved = check_saved(root / IMAGES, site_refs(index["variables"]))
    except SiteArchiveError as exc:
        raise refusal(name, str(exc)) from None
    recorded = {i["ref"]: i["id"] for i in index["images"]}
    if saved != recorded:
        raise refusal(name, "its saved images are not those its index records")


def load_images(root: Path, index: dict[str, Any]) -> None:
    logger.info("docker load %s", " ".join(site_refs(index["variables"])))
    docker.run(["load", "--input", str(root / IMAGES)], timeout_s=LOAD_TIMEOUT_S)
    for image in index["images"]:
        loaded = docker.run(["image", "inspect", "--format", "{{.Id}}", image["ref"]], check=False).stdout.strip()
        if loaded != image["id"]:
            raise SiteArchiveError(f"docker load left {image['ref']} as {loaded or 'nothing'}, not {image['id']}")


def ensure_volume(project: str) -> str:
    """The project's models volume, made with the labels compose gives its own where it is not there yet."""
    volume = volume_name(project)
    if docker.run(["volume", "inspect", volume], check=False).returncode != 0:
        docker.run(["volume", "create", "--label", f"com.docker.compose.project={project}",
                    "--label", f"com.docker.compose.volume={VOLUME}", volume])
    return volume


def place_repository(project: str, root: Path, index: dict[str, Any]) -> str:
    """Copy the repository into the volume; "stable" where ``current`` points at it, else "candidate"."""
    build = index["repository"]["build"]
    stream = root / "repository.tar"
    with tarfile.open(stream, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(root / "repository" / build, arcname=build)
        for name in index["repository"].get("volume_files", []):
            tar.add(root / "repository" / name, arcname=name)
    variables = index["variables"]
    builder = f"{variables['BUILDER_CPU_IMAGE']}:{variables['CPU_IMAGE_TAG']}"
    volume = ensure_volume(project)
    with stream.open("rb") as source:
        placed = subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "--read-only", "--cap-drop", "ALL",
                                 "--security-opt", "no-new-privileges:true", "-v", f"{volume}:/models",
                                 "--entrypoint", "sh", builder, "-c", PLACE, "sh", build, "/models"],
                                stdin=source, capture_output=True, check=False, timeout=600)
    said = placed.stdout.decode().strip().splitlines()
    if said[-1:] == ["differs"]:
        raise SiteArchiveError(f"{volume} already holds a {build} that differs from the archive's; it is kept. "
                               "A repository that changes in place (a versioned one) is handed to the rollout "
                               "(issue 25, parts 1-3), not replaced")
    if placed.returncode != 0 or not said or said[-1] not in ("stable", "candidate"):
        raise SiteArchiveError(f"could not copy the repository into {volume}: {placed.stderr.decode()[-400:]}")
    return said[-1]


def write_site(project: str, root: Path, index: dict[str, Any]) -> Path:
    """The rendered files, the image variables and the settings, swapped in whole for ``project``."""
    staged = root / "compose"
    (staged / SITE_ENV).write_text("".join(f"{k}={v}\n" for k, v in sorted(index["variables"].items())))
    (staged / SETTINGS_FILE).write_text(yaml.safe_dump(index["settings"], sort_keys=True))
    (staged / SITE_INDEX).write_text(json.dumps({k: v for k, v in index.items() if k != "files"}, indent=1) + "\n")
    final = site_dir(project)
    old = final.with_name(f".old-{project}-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staged.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def offer_candidate(project: str, index: dict[str, Any], archive: str) -> Path:
    """A newer archive on a running site: its build sits beside ``current`` in the volume, its images are loaded
    under their own tag, and this records it for the rollout.

    TODO(issue 25 parts 1-3, branch ``updates``): the deployed stack's rollout takes it from here. On that branch
    (not merged when this was written) the volume holds one versioned repository (``versions/``, with the builder's
    ``build-keys.json``) and ``python -m deploy update --local`` (``deploy.local.update.update(settings, stack,
    Update())``) builds a version from the ONNX baked into the builder image and rolls it out (canary, promotion or
    rollback, the decision recorded in the volume). The archive's builder image (``index["variables"]``, tag
    ``index["tag"]``) carries the new ONNX: point the site's ``BUILDER_CPU_IMAGE`` at it and call that entry point
    here, then move the site's files to the new tag once promoted. Until then a versioned volume refuses the
    archive in ``place_repository`` ("differs"), and an unversioned one only records the candidate.
    """
    record = site_dir(project) / CANDIDATE
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"archive": archive, "tag": index["tag"], "build": index["repository"]["build"],
                                  "variables": index["variables"]}, indent=1) + "\n")
    logger.warning("%s: the site already serves another build; %s is installed beside it as a candidate (%s). "
                   "Rolling it out in the deployed stack comes with the versioned stack (issue 25, parts 1-3)",
                   project, index["repository"]["build"], record)
    return record


def check_parts(given: Path) -> None:
    """Every part against the archive's ``.sha256`` listing where it is beside them (a part named where it differs);
    without one, the index inside is the only check (it names the member instead)."""
    try:
        listing = check_checksums(find_parts(given))
    except ServerError as exc:
        raise refusal(given.name, str(exc)) from None
    if listing is None:
        logger.warning("no %s.sha256 beside the archive: its parts are checked by the index inside alone",
                       given.name.split(".tar")[0] + ".tar")


def install_site(given: Path, project: str) -> dict[str, Any]:
    """Verify everything, then load the images and the repository (module docstring); what was installed."""
    check_engine()
    SITES_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SITES_ROOT, prefix=".incoming-") as tmp:
        root = Path(tmp)
        check_parts(given)
        index = READER.read_verified(given, root, lambda index: check_index(index, given.name))
        _check_images(root, index, given.name)
        logger.info("archive %s verified: %d files, tag %s, format %d", given.name, len(index["files"]), index["tag"],
                    FORMAT)
        load_images(root, index)
        role = place_repository(project, root, index)
        if role == "stable":
            where = write_site(project, root, index)
        else:
            where = offer_candidate(project, index, given.name)
    return {"project": project, "tag": index["tag"], "build": index["repository"]["build"], "role": role,
            "images": site_refs(index["variables"]), "site": str(where)}
