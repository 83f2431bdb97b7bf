"""The versioned build workflow: one more version beside the others, the alias, the index, the prune rule.

``python -m generator build --version N`` (or into a repository that already holds versions) lands here; the
layout is described in generator/repository/versions.py. Everything is written in one rename, so a failed
build (a gate, a load rule, a full disk) leaves the repository as it was.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from generator.builder.pipeline import build_files
from generator.builder.spec.options import BuildOptions
from generator.builder.stages.config.alias import alias_files
from generator.repository.files import sha256_bytes
from generator.repository.manifest import MANIFEST_NAME, Manifest
from generator.repository.versions import (
    DEFAULT_KEEP,
    INDEX_NAME,
    LEGACY_INDEX_NAME,
    VERSION_MANIFEST,
    RepositoryIndex,
    VersionError,
    VersionRecord,
    legacy_index,
    next_version,
    read_index,
    to_prune,
    version_model,
    version_models,
    without,
)
from generator.repository.write import update_repository, write_repository

if TYPE_CHECKING:
    from generator.builder.stages.precision.stage import PrecisionTransform

logger = logging.getLogger(__name__)
_REPORTS = ("validation.json", "validation.md")


@dataclass(frozen=True)
class VersionBuild:
    output: Path
    version: int
    index: RepositoryIndex
    pruned: tuple[int, ...]
    manifest: Manifest


def _choose_version(output: Path, index: RepositoryIndex | None, version: int | None, force: bool) -> int:
    if index is None and (output / MANIFEST_NAME).is_file() and not force:
        raise VersionError(f"{output} holds an unversioned build; pass --force to replace it with a versioned "
                           "repository, or choose another --output")
    existing = index.served if index else ()
    number = version if version is not None else next_version(existing)
    if number in existing:
        raise VersionError(f"{output} already has version {number} (versions {', '.join(map(str, existing))}); "
                           f"choose another --version, or leave it out for the next free one "
                           f"({next_version(existing)})")
    return number


def _version_manifest(manifest: Manifest, name: str, number: int) -> Manifest:
    """The build's manifest, marked with its version and the rebuild command that writes this version again."""
    words = list(manifest.rebuild)
    if "--name" in words[:-1]:
        words[words.index("--name") + 1] = name
    return dataclasses.replace(manifest, version=number, serves_as=name, rebuild=(*words, "--version", str(number)))


def add_version(onnx_path: Path, output: Path, options: BuildOptions, version: int | None = None,
                keep_versions: int | None = None, force: bool = False,
                precision_transform: PrecisionTransform | None = None) -> VersionBuild:
    """Build ``options`` as version ``version`` (default: the next free number) of ``output``.

    The first version becomes stable and gets the alias; later ones are candidates until a rollout promotes
    them. Versions beyond ``keep_versions`` are pruned, oldest first, never the stable one or its predecessor.
    """
    if options.target == "tensorrt" and options.tensorrt.defer_plan:
        raise VersionError("--defer-plan writes a repository that `generator plan` completes; it does not hold "
                           "versions: build the plan on the GPU host with --version, or drop --version")
    output = output.resolve()
    index = read_index(output)
    number = _choose_version(output, index, version, force)
    ensemble = version_model(options.name, number)
    built = build_files(onnx_path, output, dataclasses.replace(options, name=ensemble), precision_transform,
                        version=number)
    manifest = _version_manifest(built.manifest, options.name, number)
    # The gate's report goes beside the version's manifest, not at the root where versions would share it.
    files = {(f"{ensemble}/{path}" if path in _REPORTS else path): data for path, data in built.files.items()}
    files[f"{ensemble}/{VERSION_MANIFEST}"] = manifest.to_bytes()
    keep = keep_versions or (index.keep_versions if index else DEFAULT_KEEP)
    if index is None:
        alias = alias_files(options.name, built.files[f"{ensemble}/config.pbtxt"].decode())
        index = RepositoryIndex(options.name, stable=number, keep_versions=keep,
                                versions={number: VersionRecord(number, "stable")}).with_alias(
            number, {p: sha256_bytes(d) for p, d in alias.items()})
        write_repository(output, {**files, **alias, INDEX_NAME: index.to_bytes()}, force=force)
        return VersionBuild(output, number, index, (), manifest)
    if index.name != options.name:
        raise VersionError(f"{output} serves ensemble '{index.name}', not '{options.name}': pass --name {index.name}")
    index = dataclasses.replace(index, keep_versions=keep,
                                versions={**index.versions, number: VersionRecord(number)})
    pruned = to_prune(index, keep, protect={number})
    index = without(index, pruned)
    gone = [model for old in pruned for model in version_models(options.name, old)]
    if legacy_index(output):  # the index moves to versions.json; the old one goes once the new one is in
        gone.append(LEGACY_INDEX_NAME)
    update_repository(output, {**files, INDEX_NAME: index.to_bytes()}, remove=gone)
    if pruned:
        logger.info("Pruned version(s) %s (--keep-versions %d)", ", ".join(map(str, pruned)), keep)
    return VersionBuild(output, number, index, tuple(pruned), manifest)
