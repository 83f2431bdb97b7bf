"""``generator check`` on a versioned repository: every version against its own manifest, and the alias and
index against each other."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from generator.builder.stages.manifest import Manifest, ManifestError, Mismatch, compare, sha256_file
from generator.builder.stages.versions import (
    INDEX_NAME,
    ROUTE_NAME,
    VERSION_MANIFEST,
    RepositoryIndex,
    alias_files,
    version_model,
    version_models,
)

if TYPE_CHECKING:
    from generator.builder.stages.tensorrt.availability import MachineFacts


@dataclass(frozen=True)
class VersionReport:
    version: int
    manifest: Manifest
    mismatches: list[Mismatch]


def read_version_manifest(repository: Path, name: str, version: int) -> Manifest:
    path = repository / version_model(name, version) / VERSION_MANIFEST
    try:
        return Manifest.from_json(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"version {version} has no readable {path.relative_to(repository)} ({exc}); "
                            "rebuild it with python -m generator build --version") from exc


def check_version(repository: Path, index: RepositoryIndex, version: int,
                  machine: MachineFacts | None) -> VersionReport:
    manifest = read_version_manifest(repository, index.name, version)
    mismatches = compare(manifest, machine, repository, within=version_models(index.name, version))
    prefix = f"version {version}: "
    return VersionReport(version, manifest, [Mismatch(m.kind, m.subject, prefix + m.message) for m in mismatches])


def check_alias(repository: Path, index: RepositoryIndex) -> list[Mismatch]:
    """The alias files are those the index recorded, and they serve the stable version."""
    out: list[Mismatch] = []
    for rel, recorded in sorted(index.alias_files.items()):
        path = repository / rel
        if not path.is_file():
            out.append(Mismatch("file_missing", rel, f"the alias file {rel} is missing; run "
                                f"python -m generator rollback or promote again to rewrite it"))
        elif sha256_file(path) != recorded:
            out.append(Mismatch("file_changed", rel, f"the alias file {rel} changed since the index was written"))
    stable_config = repository / version_model(index.name, index.stable) / "config.pbtxt"
    alias_config = repository / f"{index.name}/config.pbtxt"
    if stable_config.is_file() and alias_config.is_file():
        expected = alias_files(index.name, stable_config.read_text())
        if alias_config.read_bytes() != expected[f"{index.name}/config.pbtxt"]:
            out.append(Mismatch("file_changed", f"{index.name}/config.pbtxt",
                                f"the alias '{index.name}' does not serve the stable version {index.stable}"))
    return out


def stray_entries(repository: Path, index: RepositoryIndex) -> list[Mismatch]:
    """Top-level entries that belong to no version, the alias or the index: Triton may load them."""
    known = {INDEX_NAME, ROUTE_NAME, index.name, *(m for v in index.versions for m in version_models(index.name, v))}
    return [Mismatch("file_added", entry.name, f"{entry.name} belongs to no version of '{index.name}' "
                     "(a pruned or foreign model?); remove it or rebuild")
            for entry in sorted(repository.iterdir()) if entry.name not in known and not entry.name.startswith(".")]
