"""``python -m deploy archive --local``: on a connected machine, one archive that installs the CPU stack on a site
with no network (the format: site.py).

1. ``build``: the engine floor, the base images, the stack's images (layer-cached, as ``deploy up`` does);
2. the repository: the builder image run once, with no network, into a scratch volume, exactly as the stack's
   builder runs; what ``/models/current`` points at is carried, its manifests among its files. For another
   architecture (``--platform``, run emulated here) the builder of this daemon's own architecture makes it: the
   CPU stack's repository (ONNX, Python backend, configuration) is the same bytes on every architecture, and
   emulation is 10-20x slower. The site's own builder then finds it built from the same settings and reuses it;
3. the compose file, .env and the configuration files it binds, rendered from the same settings;
4. ``docker save`` of the images under the archive's own tags (``tde-site/<name>:<tag>``), one tar: layers that
   images share travel once. The tags are removed from this machine again (the images keep their own);
5. the index, first, with every member's size and sha256; the tar is renamed into place whole, then split;
   ``NAME.sha256`` beside it lists the sha256 of every part (``sha256sum -c`` reads it): a few lines to carry, or
   sign, apart from the archive.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from deploy.commands import builder_command
from deploy.local import docker
from deploy.local.platforms import Platform, daemon_platform
from deploy.local.site import (
    BASE_IMAGES,
    BUILT_IMAGES,
    COMPOSE_FILES,
    FORMAT,
    IMAGES,
    INDEX,
    KIND,
    SiteArchiveError,
    check_tag,
    site_refs,
    site_variables,
)
from deploy.local.stack import DEPLOY_DIR, LocalStack, build, installed_site, platform_env
from deploy.settings import BUILD_TARGETS, Settings
from generator import __version__
from generator.archive.indexed_tar import file_entries, members_of, publish
from generator.archive.parts import checksum_file

logger = logging.getLogger(__name__)

SCRATCH_LABEL = "org.triton-detection-ensemble.site-archive"
BUILD_TIMEOUT_S = 1800.0
SAVE_TIMEOUT_S = 1800.0
# What `current` points at, and the volume's top-level plain files (none of them hidden), as one tar on stdout.
EXPORT = 'cd /models && tar -c "$(readlink current)" $(find . -maxdepth 1 -type f ! -name ".*" -printf "%P ")'


def source_refs(bases: dict[str, str], overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The .env variable -> the local image the stack runs: the built ones as compose names them (deploy/.env,
    where the environment wins, compose's rule, and the run's own ``overrides`` win over both), the bases as
    chosen."""
    from deploy.composefile import parse_env

    committed = parse_env((DEPLOY_DIR / ".env").read_text(encoding="utf-8"))

    def value(key: str) -> str:
        return (overrides or {}).get(key) or os.environ.get(key) or committed[key]

    return {**{v: f"{value(v)}:{value('CPU_IMAGE_TAG')}" for v in BUILT_IMAGES}, **{v: bases[v] for v in BASE_IMAGES}}


def default_tag(ids: dict[str, str], settings: Settings) -> str:
    """``site-`` and 12 hex digits of the images and the settings: the same stack makes the same tag."""
    digest = hashlib.sha256(json.dumps([ids, changed_settings(settings)], sort_keys=True).encode()).hexdigest()
    return f"site-{digest[:12]}"


def changed_settings(settings: Settings) -> dict[str, Any]:
    """The settings that differ from the defaults (the site's `deploy up` reads them back)."""
    default = Settings()
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(Settings)
            if getattr(settings, f.name) != getattr(default, f.name)}


def _safe_extract(stream: Path, into: Path) -> str:
    """Extract the builder's tar (the repository folder and the volume's own top-level files, plain files and
    folders only); the folder's name."""
    folders: set[str] = set()
    with tarfile.open(stream) as tar:
        for member in tar:
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts or not (member.isdir() or member.isfile()):
                raise SiteArchiveError(f"the builder's repository holds {member.name!r} (not a plain file or folder)")
            if len(parts) > 1 or member.isdir():
                folders.add(parts[0])
            target = into / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
    if len(folders) != 1:
        raise SiteArchiveError(f"the builder's /models/current holds {sorted(folders)}, not one repository folder")
    return folders.pop()


def build_repository(settings: Settings, builder: str, into: Path, scratch: Path) -> str:
    """Run the builder image as the stack runs it (no network) into a scratch volume; copy what ``current``
    points at into ``into``, with the volume's own top-level files (a builder's record of what it built, which the
    site's builder reads to find the build it would make); the repository folder's name."""
    volume = f"tde-site-archive-{os.getpid()}"
    docker.run(["volume", "create", "--label", f"{SCRATCH_LABEL}=scratch", volume])
    hardening = ["--network", "none", "--read-only", "--tmpfs", "/tmp:size=2g", "--cap-drop", "ALL",
                 "--security-opt", "no-new-privileges:true"]
    try:
        logger.info("building the repository with %s (no network)", builder)
        docker.run(["run", "--rm", *hardening, "-v", f"{volume}:/models", builder,
                    *builder_command(settings, BUILD_TARGETS["builder-cpu"])], timeout_s=BUILD_TIMEOUT_S)
        stream = scratch / "repository.tar"
        with stream.open("wb") as sink:
            exported = subprocess.run(["docker", "run", "--rm", *hardening, "-v", f"{volume}:/models:ro",
                                       "--entrypoint", "sh", builder, "-c", EXPORT],
                                      stdout=sink, stderr=subprocess.PIPE, text=False, check=False, timeout=600)
        if exported.returncode != 0:
            raise SiteArchiveError(f"could not read the built repository: {exported.stderr.decode()[-400:]}")
        into.mkdir(parents=True)
        name = _safe_extract(stream, into)
        stream.unlink()
        return name
    finally:
        docker.run(["volume", "rm", "--force", volume], check=False)


def write_compose(settings: Settings, into: Path) -> None:
    """The rendered files a started CPU stack reads, from these settings."""
    from deploy.render.files import render_all

    rendered = render_all(settings)
    for name in COMPOSE_FILES:
        path = into / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered[name], encoding="utf-8")


def check_saved(path: Path, refs: list[str]) -> dict[str, str]:
    """``docker save``'s own manifest: every ref there, every layer and config it names present; ref -> image id.

    A daemon that has none of the layers loads only what the tar holds: a missing one is found here, not there.
    """
    try:
        with tarfile.open(path) as tar:
            names = set(tar.getnames())
            handle = tar.extractfile("manifest.json")
            manifest = json.loads(handle.read() if handle else b"[]")
    except (tarfile.TarError, KeyError, ValueError, OSError) as exc:
        raise SiteArchiveError(f"{IMAGES} is not a docker save tar with a manifest.json ({exc})") from None
    ids: dict[str, str] = {}
    for entry in manifest:
        missing = [name for name in [entry.get("Config", ""), *entry.get("Layers", [])] if name not in names]
        if missing:
            raise SiteArchiveError(f"{IMAGES} lacks {missing[0]}, which {entry.get('RepoTags')} needs")
        config = Path(entry["Config"]).name.removesuffix(".json")
        ids.update(dict.fromkeys(entry.get("RepoTags") or [], f"sha256:{config}"))
    absent = [ref for ref in refs if ref not in ids]
    if absent:
        raise SiteArchiveError(f"{IMAGES} does not hold {', '.join(absent)}")
    return {ref: ids[ref] for ref in refs}


def save_images(sources: dict[str, str], variables: dict[str, str], path: Path) -> dict[str, str]:
    """Tag each source image with the archive's tag, ``docker save`` them all into one tar, untag what was tagged
    here; the saved ref -> image id."""
    targets = dict(zip(sources.values(), site_refs(variables), strict=True))  # source ref -> site ref
    made = []
    try:
        for source, target in targets.items():
            if not docker.has_image(target):
                docker.run(["tag", source, target])
                made.append(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        logger.info("docker save %s", " ".join(targets.values()))
        docker.run(["save", "--output", str(path), *targets.values()], timeout_s=SAVE_TIMEOUT_S)
    finally:
        if made:
            docker.run(["image", "rm", *made], check=False)  # only the tags: the source tags keep the images
    return check_saved(path, list(targets.values()))


def repository_builder(settings: Settings, stack: LocalStack, target: Platform, builder: str) -> str:
    """The builder image that makes the archive's repository: the target's own, or, where the target runs
    emulated here, this daemon's (step 2 of the module docstring), built (layer-cached) under its default tags."""
    native = daemon_platform()
    if target == native:
        return builder
    logger.info("the repository is the same on every architecture: building it with the %s builder, not under "
                "%s emulation", native.docker, target.machine)
    own = dataclasses.replace(stack, platform=None)
    return source_refs(build(settings, own))["BUILDER_CPU_IMAGE"]


def make_site_archive(settings: Settings, stack: LocalStack, output: Path, *, tag: str | None = None,
                      split_bytes: int | None = None) -> tuple[list[Path], Path]:
    """Steps 1-5 of the module docstring; the archive's path, or its parts, and their ``.sha256`` listing."""
    if installed_site(stack.project) is not None:  # its compose files are the archive's, not this checkout's
        raise SiteArchiveError(f"the project {stack.project} is a site installed from an archive; make archives "
                               "with another --project (the default, or any name of yours)")
    bases = build(settings, stack)
    sources = source_refs(bases, platform_env(settings, stack))
    ids = {variable: docker.require_image_id(ref) for variable, ref in sources.items()}
    tag = check_tag(tag or default_tag(ids, settings))
    variables = site_variables(tag)
    target = stack.target()
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output, prefix=".tde-site-") as tmp:
        payload = Path(tmp) / "payload"
        builder = repository_builder(settings, stack, target, sources["BUILDER_CPU_IMAGE"])
        build_name = build_repository(settings, builder, payload / "repository", Path(tmp))
        write_compose(settings, payload / "compose")
        images = save_images(sources, variables, payload / IMAGES)
        members = members_of(payload)
        manifests = sorted(n for n in members if n.startswith("repository/") and n.endswith("/manifest.json"))
        index = {"format": FORMAT, "kind": KIND, "tool_version": __version__, "machine": target.machine,
                 "platform": target.docker, "tag": tag, "variables": variables, "images": [{"ref": r, "id": i} for r, i in images.items()],
                 "repository": {"build": build_name, "manifests": manifests,
                                "volume_files": sorted(n.split("/", 1)[1] for n in members if n.count("/") == 1
                                                       and n.startswith("repository/"))},
                 "settings": changed_settings(settings), "files": file_entries(members)}
        paths = publish(Path(tmp) / f"tde-site-{tag}.tar", output, INDEX, index, members, split_bytes)
    return paths, checksum_file(paths)
