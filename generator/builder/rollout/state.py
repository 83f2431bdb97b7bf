"""The repository side of a rollout: promote a version (the alias moves to it) or mark it rolled back, with the
decision record beside the version, written in one rename (generator.builder.stages.repository)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from generator.builder.stages.manifest import sha256_bytes
from generator.builder.stages.repository import update_repository
from generator.builder.stages.versions import (
    INDEX_NAME,
    RepositoryIndex,
    VersionError,
    alias_files,
    version_model,
)


def record_path(index: RepositoryIndex, version: int, stamp: str) -> str:
    """Where a decision about ``version`` is kept: beside its manifest (``NAME_vN/rollout-<UTC stamp>.json``)."""
    return f"{version_model(index.name, version)}/rollout-{stamp}.json"


def _record_bytes(record: dict[str, object]) -> bytes:
    return (json.dumps(record, indent=2) + "\n").encode()


def promote(repository: Path, index: RepositoryIndex, version: int, record: dict[str, object],
            stamp: str) -> RepositoryIndex:
    """Point the alias at ``version``: it becomes stable, the previous stable the rollback target."""
    config = repository / version_model(index.name, version) / "config.pbtxt"
    if not config.is_file():
        raise VersionError(f"version {version} has no ensemble config {config}; rebuild it")
    alias = alias_files(index.name, config.read_text())
    where = record_path(index, version, stamp)
    promoted = dataclasses.replace(index.promoted(version, where),
                                   alias_files={p: sha256_bytes(d) for p, d in alias.items()})
    update_repository(repository, {**alias, where: _record_bytes(record), INDEX_NAME: promoted.to_bytes()})
    return promoted


def mark_rolled_back(repository: Path, index: RepositoryIndex, version: int, record: dict[str, object],
                     stamp: str) -> RepositoryIndex:
    """Record that ``version`` was rolled back; the alias and the stable version stay as they are."""
    where = record_path(index, version, stamp)
    updated = index.with_state(version, "rolled_back", where)
    update_repository(repository, {where: _record_bytes(record), INDEX_NAME: updated.to_bytes()})
    return updated


def revert(repository: Path, index: RepositoryIndex, record: dict[str, object], stamp: str) -> RepositoryIndex:
    """Manual rollback after a promotion: the alias goes back to the previous stable version; the record is
    kept beside the version rolled back."""
    previous, current = index.previous_stable, index.stable
    if previous is None or previous not in index.versions:
        raise VersionError(f"nothing to roll back to: version {current} is stable and no earlier stable "
                           "version is kept")
    config = repository / version_model(index.name, previous) / "config.pbtxt"
    alias = alias_files(index.name, config.read_text())
    where = record_path(index, current, stamp)
    back = index.with_state(current, "rolled_back", where).with_state(previous, "stable")
    back = dataclasses.replace(back, stable=previous, previous_stable=None,
                               alias_files={p: sha256_bytes(d) for p, d in alias.items()})
    update_repository(repository, {**alias, where: _record_bytes(record), INDEX_NAME: back.to_bytes()})
    return back
