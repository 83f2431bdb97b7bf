"""The repository side of a rollout: promote a version (the alias moves to it) or mark it rolled back, with the
decision record beside the version, the index replaced last (generator.repository.write.update_repository)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from generator.builder.stages.config.alias import alias_files
from generator.repository.files import sha256_bytes
from generator.repository.versions import (
    INDEX_NAME,
    LEGACY_INDEX_NAME,
    RepositoryIndex,
    VersionError,
    legacy_index,
    version_model,
)
from generator.repository.write import update_repository


def record_path(index: RepositoryIndex, version: int, stamp: str) -> str:
    """Where a decision about ``version`` is kept: beside its manifest (``NAME_vN/rollout-<UTC stamp>.json``)."""
    return f"{version_model(index.name, version)}/rollout-{stamp}.json"


def _record_bytes(record: dict[str, object]) -> bytes:
    return (json.dumps(record, indent=2) + "\n").encode()


def _update(repository: Path, add: Mapping[str, bytes], index: RepositoryIndex) -> RepositoryIndex:
    """Write ``add`` and then the index; an index still kept as the root manifest.json (a repository built before
    versions.json) moves to versions.json."""
    old = [LEGACY_INDEX_NAME] if legacy_index(repository) else []
    update_repository(repository, {**add, INDEX_NAME: index.to_bytes()}, remove=old)
    return index


def _alias(repository: Path, index: RepositoryIndex, version: int) -> tuple[dict[str, bytes], dict[str, str]]:
    """The alias files made from ``version``'s ensemble config, and their hashes for the index."""
    config = repository / version_model(index.name, version) / "config.pbtxt"
    if not config.is_file():
        raise VersionError(f"version {version} has no ensemble config {config}; rebuild it")
    alias = alias_files(index.name, config.read_text())
    return alias, {p: sha256_bytes(d) for p, d in alias.items()}


def promote(repository: Path, index: RepositoryIndex, version: int, record: dict[str, object],
            stamp: str) -> RepositoryIndex:
    """Point the alias at ``version``: it becomes stable, the previous stable the rollback target."""
    alias, hashes = _alias(repository, index, version)
    where = record_path(index, version, stamp)
    promoted = index.promoted(version, where).with_alias(version, hashes)
    return _update(repository, {**alias, where: _record_bytes(record)}, promoted)


def mark_rolled_back(repository: Path, index: RepositoryIndex, version: int, record: dict[str, object],
                     stamp: str) -> RepositoryIndex:
    """Record that ``version`` was rolled back; the alias and the stable version stay as they are."""
    where = record_path(index, version, stamp)
    return _update(repository, {where: _record_bytes(record)}, index.with_state(version, "rolled_back", where))


def revert(repository: Path, index: RepositoryIndex, record: dict[str, object], stamp: str) -> RepositoryIndex:
    """Manual rollback after a promotion: the alias goes back to the previous stable version; the record is
    kept beside the version rolled back."""
    previous, current = index.previous_stable, index.stable
    if previous is None or previous not in index.versions:
        raise VersionError(f"nothing to roll back to: version {current} is stable and no earlier stable "
                           "version is kept")
    alias, hashes = _alias(repository, index, previous)
    where = record_path(index, current, stamp)
    back = index.with_state(current, "rolled_back", where).with_state(previous, "stable")
    back = dataclasses.replace(back, stable=previous, previous_stable=None).with_alias(previous, hashes)
    return _update(repository, {**alias, where: _record_bytes(record)}, back)


def note(repository: Path, index: RepositoryIndex, version: int, record: dict[str, object],
         stamp: str) -> RepositoryIndex:
    """Keep a later record about ``version`` (the watch after its promotion); its state stays as it is."""
    where = record_path(index, version, stamp)
    return _update(repository, {where: _record_bytes(record)},
                   index.with_state(version, index.versions[version].state, where))
