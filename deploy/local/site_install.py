"""``python -m deploy install --local ARCHIVE``: a site archive installed on a machine with no network.

Everything is checked before anything is loaded: every part there and whole (and its sha256 the one the
archive's ``.sha256`` listing gives, where that is beside it), the index first and of this kind
and for an architecture the Docker daemon runs (its own, or another one whose emulation is registered:
deploy/local/platforms.py), every member listed with its size and sha256 (generator/archive/indexed_tar.py, the reader the
embedded server's archive uses too), nothing unlisted, nothing missing, and ``docker save``'s own manifest naming
every image with every layer it needs. A refusal names the archive and the problem and loads nothing. Then:

1. ``docker load`` of the images, each checked to carry the image id the index recorded;
2. the repository copied into the project's models volume (made with compose's labels where it is not there yet)
   by the builder image, with no network: staged in a hidden folder, renamed into place; a folder of that name
   already there is kept, and must equal the archive's; the volume's own top-level files that travel with it (the
   builder's record of what it built) are put where the volume has none;
3. where the volume has no ``current`` yet (a new site), ``current`` points at it (the builder's versioned
   repository, ``versions``, its first version stable) and the rendered files, the image variables and the
   settings go to ``deploy/.local/.sites/<project>/``: ``deploy up --local`` then starts the stack from them,
   building nothing and pulling nothing (the builder finds its version already built).
4. where the volume already serves a versioned repository (a running site), nothing in it is replaced: the
   archive's model becomes the next version beside the stable one and is rolled out by the deployed stack's own
   rollout (``roll_out``: what ``deploy update --local`` runs), ending promoted or rolled back with its decision
   recorded. A site of the classic unversioned layout only gets the new build beside it (``offer_candidate``).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from deploy.errors import LocalStackError
from deploy.local import docker
from deploy.local.docker_versions import check_engine
from deploy.local.platforms import (
    Platform,
    by_machine,
    daemon_platform,
    emulation_registered,
    why_not_runnable,
)
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
from deploy.local.update import Update
from generator.archive.parts import check_checksums, find_parts
from generator.errors import ServerError
from generator.operate.rollout.outcome import WORDS

logger = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 1800.0
SITE_INDEX = "site.json"  # the installed archive's index (without its file list), beside the rendered files
CANDIDATE = "candidate.json"
ROLLOUT_RECORD = "install-rollout.json"  # the rollout a newer archive ran, beside the site's files
# Run by the builder image as its own user, no network: stage, rename into place, link `current` where none is.
# A volume already serving a versioned repository (deploy/entrypoints/build_models.py VERSIONS_DIR) is left as it is
# ("running"): the rollout adds the version.
PLACE = r"""set -e
b="$1"; cd "$2"; s=".$b.site"
rm -rf "$s"; mkdir "$s"; tar -x -C "$s"
if [ -d "$b" ] && [ "$b" = versions ] && [ "$(readlink current)" = versions ]; then rm -rf "$s"; echo running; exit 0; fi
if [ ! -e "$b" ]; then mv "$s/$b" "$b"; elif ! diff -r -q "$s/$b" "$b" >/dev/null; then rm -rf "$s"; echo differs; exit 0; fi
for f in "$s"/*; do n="${f##*/}"; if [ -f "$f" ] && [ ! -e "$n" ]; then mv "$f" "$n"; fi; done
rm -rf "$s"
if [ ! -e current ] && [ ! -L current ]; then ln -s "$b" .current.tmp-site; mv -T .current.tmp-site current; fi
if [ "$(readlink current)" = "$b" ]; then echo stable; else echo candidate; fi
"""


def archive_platform(index: dict[str, Any], name: str) -> Platform:
    """The architecture of the archive's images (archives before ``platform`` was recorded name the machine)."""
    recorded = str(index.get("platform") or index.get("machine"))
    try:
        return by_machine(recorded)
    except LocalStackError:
        raise refusal(name, f"its images are for {recorded}, which this stack is not built for") from None


def check_index(index: dict[str, Any], name: str, daemon: Platform | None = None) -> None:
    """Refuse an index that is not a site archive for this daemon (default: this machine's architecture), before
    a member is read."""
    if index.get("kind") != KIND:
        raise refusal(name, f"it is not a site archive (kind {index.get('kind')!r}); python -m generator serve "
                            "--prepare --from-archive installs the embedded server's")
    target = archive_platform(index, name)
    reason = why_not_runnable(target, daemon or by_machine(platform.machine()))
    if reason is not None:
        raise refusal(name, f"its images are for {target.docker} ({target.machine}) and {reason}")
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
    """Copy the repository into the volume; "stable" where ``current`` points at it, "running" where the volume
    already serves a versioned repository (untouched: ``roll_out`` adds the archive's version), else "candidate"."""
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
        raise SiteArchiveError(f"{volume} already holds a {build} that differs from the archive's and is not the "
                               "one it serves; it is kept, nothing was placed")
    if placed.returncode != 0 or not said or said[-1] not in ("stable", "running", "candidate"):
        raise SiteArchiveError(f"could not copy the repository into {volume}: {placed.stderr.decode()[-400:]}")
    return said[-1]


def stage_site(root: Path, index: dict[str, Any]) -> Path:
    """The archive's rendered files with the image variables, the settings and the index beside them."""
    staged = root / "compose"
    # Compose starts the site's containers for the archive's architecture (emulated where the daemon's differs).
    known = index.get("platform") or index.get("machine")
    recorded = {"DOCKER_DEFAULT_PLATFORM": archive_platform(index, "").docker} if known else {}
    env = {**index["variables"], **recorded}
    (staged / SITE_ENV).write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
    (staged / SETTINGS_FILE).write_text(yaml.safe_dump(index["settings"], sort_keys=True))
    (staged / SITE_INDEX).write_text(json.dumps({k: v for k, v in index.items() if k != "files"}, indent=1) + "\n")
    return staged


def write_site(project: str, staged: Path) -> Path:
    """The staged site files swapped in whole for ``project``."""
    final = site_dir(project)
    old = final.with_name(f".old-{project}-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staged.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def installed_tag(project: str) -> str | None:
    """The tag of the archive the site's files come from (None where none was installed)."""
    try:
        return str(json.loads((site_dir(project) / SITE_INDEX).read_text())["tag"])
    except (OSError, ValueError, KeyError):
        return None


def roll_out(project: str, staged: Path, index: dict[str, Any], change: Update) -> dict[str, Any]:
    """A newer archive on a running versioned site: ``deploy update --local``'s own steps (deploy/local/update.py).
    The builder of the archive's tag (its ONNX, with the archive's settings) adds the next version beside the
    stable one, with no network; the rollout service tries it (on the site's own control images where ``change``
    names them) and promotes or rolls it back, the decision in the volume. Promoted, the site's files move to the
    archive's tag (the next ``up`` runs its images); rolled back, they stay. The decision record is kept beside
    the site's files too."""
    from deploy.local.stack import LocalStack, read_env_file
    from deploy.local.update import update
    from deploy.settings import load_settings

    stack = LocalStack(project=project)
    if installed_tag(project) == index["tag"]:
        logger.info("%s already runs the archive %s: nothing to roll out", project, index["tag"])
        return {"action": "none", "exit": 0, "version": None, "record": None}
    if not read_env_file(stack):
        raise SiteArchiveError(f"{volume_name(project)} serves a versioned repository but the stack {project} is "
                               f"not up: python -m deploy up --local --project {project}, then install the archive "
                               "again (its images are loaded)")
    settings = load_settings(staged / SETTINGS_FILE)
    code, record = update(settings, stack, replace(change, builder_tag=index["tag"]))
    where = write_site(project, staged) if code == 0 else site_dir(project)
    (where / ROLLOUT_RECORD).write_text(json.dumps({"tag": index["tag"], "exit": code, "record": record},
                                                   indent=1) + "\n")
    failed = record.get("failed")
    logger.info("%s: the archive %s's model, version %s, was %s (%s); the site's files are %s's; the decision: %s",
                project, index["tag"], record.get("candidate"), WORDS[code],
                f"failed: {failed}" if failed else f"short: {record.get('insufficient')}" if code else
                "every check passed",
                index["tag"] if code == 0 else installed_tag(project), where / ROLLOUT_RECORD)
    return {"action": record.get("action"), "exit": code, "version": record.get("candidate"),
            "record": str(where / ROLLOUT_RECORD)}


def offer_candidate(project: str, index: dict[str, Any], archive: str) -> Path:
    """A newer archive on a running site of the classic layout (one unversioned build per key): its build sits
    beside ``current`` in the volume, its images are loaded under their own tag, and this records it. That layout
    has no rollout: its builder switches ``current`` by itself at the next ``up`` of the new files. A versioned
    site (what the builder writes now) goes through ``roll_out`` instead."""
    record = site_dir(project) / CANDIDATE
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"archive": archive, "tag": index["tag"], "build": index["repository"]["build"],
                                  "variables": index["variables"]}, indent=1) + "\n")
    logger.warning("%s: the site serves another build of the classic, unversioned layout; %s is installed beside "
                   "it as a candidate (%s), not rolled out", project, index["repository"]["build"], record)
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


def check_control(change: Update) -> None:
    """The site's control images and labels are there before anything is loaded (a rollout would refuse them late)."""
    for flag, path in (("--control-images", change.control_images), ("--control-labels", change.control_labels)):
        if path is not None and not path.exists():
            raise SiteArchiveError(f"{flag} {path} does not exist: nothing was loaded")
    if change.control_labels is not None and change.control_images is None:
        raise SiteArchiveError("--control-labels label the images of --control-images: give both")


def install_site(given: Path, project: str, change: Update | None = None) -> dict[str, Any]:
    """Verify everything, then load the images and the repository (module docstring); what was installed, and on
    a running site what its rollout decided. ``change``: the rollout's flags and control images on a running site
    (a new site has nothing to roll out, and says so when they were given)."""
    change = change or Update()
    check_control(change)
    check_engine()
    SITES_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SITES_ROOT, prefix=".incoming-") as tmp:
        root = Path(tmp)
        check_parts(given)
        daemon = daemon_platform()
        index = READER.read_verified(given, root, lambda index: check_index(index, given.name, daemon))
        target = archive_platform(index, given.name)
        if target != daemon and emulation_registered(target):
            logger.warning("the archive's images are for %s and run emulated on this %s daemon: the same images "
                           "and path, 10-20x slower", target.docker, daemon.docker)
        _check_images(root, index, given.name)
        logger.info("archive %s verified: %d files, tag %s, format %d", given.name, len(index["files"]), index["tag"],
                    FORMAT)
        load_images(root, index)
        role = place_repository(project, root, index)
        staged = stage_site(root, index)
        done: dict[str, Any] = {}
        if role == "stable":
            where = write_site(project, staged)
            if change.rollout_flags or change.control_images:
                logger.warning("%s is a new site: its first version serves as it is, with nothing to roll out (the "
                               "rollout flags and control images apply to a later archive)", project)
        elif role == "running":
            role, done = "candidate", {"rollout": roll_out(project, staged, index, change)}
            where = site_dir(project)
        else:
            where = offer_candidate(project, index, given.name)
    return {"project": project, "tag": index["tag"], "build": index["repository"]["build"], "role": role,
            "images": site_refs(index["variables"]), "site": str(where), **done}
