"""Numbered versions side by side in one repository: names, the repository index, the alias, the prune rule.

Triton keeps one ``config.pbtxt`` per model, shared by all its version folders, and an ensemble's steps are part
of that config: two versions of one ensemble cannot pin two versions of a composing model
(triton-inference-server/server #4627, #6630: "you will need to have different ensemble models"). So version N of
ensemble NAME is its own set of models, ``NAME_vN`` and ``NAME_vN_<step>``, each with the version folder ``N`` and
``version_policy { specific { versions: [N] } }``: every version keeps its own configs (queue policy, thresholds,
I/O) and the metrics carry ``version="N"``. ``NAME`` itself is the alias: a copy of the stable version's ensemble
config under the plain name, which is what clients call. The index (``versions.json`` at the root) says which
versions exist, which one is stable and which version the alias was made from; every version has its own manifest,
``NAME_vN/manifest.json``. Repositories written before the index had its own name keep it in the root
``manifest.json``: it is read from there, and the first update writes ``versions.json`` in its place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from generator.errors import GeneratorError
from generator.repository.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    read_manifest,
    read_manifest_file,
)
from generator.serving.contract import STEPS, step_model_name

INDEX_NAME = "versions.json"
LEGACY_INDEX_NAME = "manifest.json"  # where repositories built before the index had its own name keep it
ROUTE_NAME = "routing.json"  # the split the rollout publishes for clients (clients/canary.py)
PROGRESS_NAME = "rollout.json"  # the rollout under way, so that the next one finishes an interrupted one safe
LAYOUT = "versioned"
VERSION_MANIFEST = MANIFEST_NAME  # inside the version's ensemble folder
ALIAS_VERSION = 1  # the alias ensemble's own (only) version folder
DEFAULT_KEEP = 3
_VERSIONED_MODEL = re.compile(r"^(?P<name>.+)_v(?P<version>[1-9][0-9]*)$")


class VersionError(GeneratorError):
    """A version that cannot be added, found, promoted or rolled back."""


def version_model(name: str, version: int) -> str:
    """The ensemble of one version: ``yolo`` version 3 is ``yolo_v3``."""
    return f"{name}_v{version}"


def version_models(name: str, version: int) -> tuple[str, ...]:
    """Every Triton model of one version: its ensemble and its composing steps."""
    ensemble = version_model(name, version)
    return (ensemble, *(step_model_name(ensemble, step) for step in STEPS))


def version_of_model(name: str, model: str) -> int | None:
    """The version a model name belongs to (``yolo_v3_nms`` -> 3), or None for the alias and other models."""
    for step in ("", *(f"_{s}" for s in STEPS)):
        stem = model.removesuffix(step) if step else model
        if step and stem == model:
            continue
        match = _VERSIONED_MODEL.fullmatch(stem)
        if match and match.group("name") == name:
            return int(match.group("version"))
    return None


@dataclass(frozen=True)
class VersionRecord:
    """What the index says about one version."""

    version: int
    state: str = "candidate"  # candidate -> stable / retired / rolled_back
    decision: str | None = None  # the rollout's decision record, relative to the repository

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "decision": self.decision}


@dataclass(frozen=True)
class RepositoryIndex:
    """The root ``versions.json`` of a versioned repository.

    ``alias_files`` are the sha256 of the alias files as written, ``alias_version`` the version whose ensemble
    config they were made from (None in an index written before it was recorded).
    """

    name: str
    stable: int
    keep_versions: int = DEFAULT_KEEP
    previous_stable: int | None = None
    versions: Mapping[int, VersionRecord] = field(default_factory=dict)
    alias_files: Mapping[str, str] = field(default_factory=dict)  # alias path -> sha256
    alias_version: int | None = None

    def __post_init__(self) -> None:
        if self.keep_versions < 1:
            raise VersionError(f"--keep-versions must be at least 1, got {self.keep_versions}")
        if self.stable not in self.versions:
            raise VersionError(f"the index names version {self.stable} stable but has no such version")

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": "triton-detection-ensemble",
            "layout": LAYOUT,
            "name": self.name,
            "stable": self.stable,
            "previous_stable": self.previous_stable,
            "keep_versions": self.keep_versions,
            "versions": {str(v): r.to_json() for v, r in sorted(self.versions.items())},
            "alias_files": dict(sorted(self.alias_files.items())),
            "alias_version": self.alias_version,
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RepositoryIndex:
        try:
            versions = {int(v): VersionRecord(int(v), str(r["state"]), r.get("decision"))
                        for v, r in data["versions"].items()}
            previous, alias = data.get("previous_stable"), data.get("alias_version")
            return cls(name=str(data["name"]), stable=int(data["stable"]), keep_versions=int(data["keep_versions"]),
                       previous_stable=None if previous is None else int(previous), versions=versions,
                       alias_files={str(k): str(v) for k, v in data.get("alias_files", {}).items()},
                       alias_version=None if alias is None else int(alias))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise VersionError(f"the repository index is malformed ({type(exc).__name__}: {exc})") from exc

    @property
    def served(self) -> tuple[int, ...]:
        return tuple(sorted(self.versions))

    def candidate(self) -> int:
        """The newest version above the stable one that has not been rolled back: what a rollout tries."""
        waiting = [v for v, r in self.versions.items() if v > self.stable and r.state == "candidate"]
        if not waiting:
            raise VersionError(f"no candidate version: stable is {self.stable} and nothing newer waits "
                               f"(versions {', '.join(map(str, self.served))}); build one with --version")
        return max(waiting)

    def with_state(self, version: int, state: str, decision: str | None = None) -> RepositoryIndex:
        record = replace(self.versions[version], state=state, decision=decision or self.versions[version].decision)
        return replace(self, versions={**self.versions, version: record})

    def promoted(self, version: int, decision: str | None) -> RepositoryIndex:
        index = self.with_state(self.stable, "retired").with_state(version, "stable", decision)
        return replace(index, stable=version, previous_stable=self.stable)

    def with_alias(self, version: int, files: Mapping[str, str]) -> RepositoryIndex:
        """The alias now made from ``version``'s ensemble config, with these file hashes."""
        return replace(self, alias_version=version, alias_files=dict(files))


def is_index(data: Mapping[str, Any]) -> bool:
    return data.get("layout") == LAYOUT


def next_version(existing: Iterable[int]) -> int:
    return max(existing, default=0) + 1


def to_prune(index: RepositoryIndex, keep: int, protect: Iterable[int] = ()) -> list[int]:
    """Versions to delete so that at most ``keep`` remain: the oldest first, never the stable one, the one
    before it (a rollback target) or ``protect`` (the version just added)."""
    protected = {index.stable, *protect}
    if index.previous_stable is not None:
        protected.add(index.previous_stable)
    removable = sorted(v for v in index.versions if v not in protected)
    excess = len(index.versions) - keep
    return removable[:max(excess, 0)]


def without(index: RepositoryIndex, versions: Iterable[int]) -> RepositoryIndex:
    gone = set(versions)
    return replace(index, versions={v: r for v, r in index.versions.items() if v not in gone})


def parse_version(text: str) -> int | None:
    """``--version``: a positive integer, or ``next`` (None: the next free number)."""
    if text == "next":
        return None
    if not text.isdigit() or int(text) < 1:
        raise VersionError(f"--version must be a positive integer or 'next', got {text!r}")
    return int(text)


def read_index(repository: Path) -> RepositoryIndex | None:
    """The index of a versioned repository, or None for a classic (single-build) one or a missing folder."""
    for name in (INDEX_NAME, LEGACY_INDEX_NAME):
        path = repository / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise VersionError(f"cannot read {path}: {exc}") from exc
        if isinstance(data, dict) and is_index(data):
            return RepositoryIndex.from_json(data)
    return None


def legacy_index(repository: Path) -> bool:
    """True when the root ``manifest.json`` is an index (a repository written before ``versions.json``)."""
    path = repository / LEGACY_INDEX_NAME
    try:
        data = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and is_index(data)


def read_version_manifest(repository: Path, name: str, version: int) -> Manifest:
    path = repository / version_model(name, version) / VERSION_MANIFEST
    rebuild = "rebuild it with python -m generator build --version"
    try:
        return read_manifest_file(path, f"version {version} has no {path.relative_to(repository)}; {rebuild}")
    except ManifestError as exc:
        if not path.is_file():
            raise
        raise ManifestError(f"version {version}: {exc}; {rebuild}") from exc


def served_manifest(repository: Path, version: int | None = None) -> Manifest:
    """The manifest of what ``repository`` serves: its own, or a versioned repository's stable version's (or
    ``version``'s)."""
    index = read_index(repository)
    if index is None:
        if version is not None:
            raise VersionError(f"{repository} holds no versions; drop --version")
        return read_manifest(repository)
    number = index.stable if version is None else version
    if number not in index.versions:
        raise VersionError(f"{repository} has no version {number} (versions {', '.join(map(str, index.served))})")
    return read_version_manifest(repository, index.name, number)
