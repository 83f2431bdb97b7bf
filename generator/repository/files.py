"""Which files of a repository are the build, and their sha256: what the manifest records and ``check`` compares.

Runtime caches (``__pycache__``, ``.pyc``: the Python backend writes them while serving), reports about the build
(``validation.*``, rewritten by ``generator validate``), checkout placeholders and the records a versioned
repository keeps (its index, each version's manifest and rollout decisions) are not part of what was built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from generator.repository.manifest import MANIFEST_NAME

_RUNTIME_ARTIFACTS = ("__pycache__",)
_RUNTIME_SUFFIXES = (".pyc",)
# Reports about the build (rewritten by `generator validate`) and checkout files, not what is served.
UNHASHED_TOP_LEVEL = ("validation.json", "validation.md", ".gitignore", ".gitkeep")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_files(files: Mapping[str, bytes]) -> dict[str, str]:
    """Hashes of in-memory repository files (for builds that write the repository at once)."""
    return {
        path: sha256_bytes(content)
        for path, content in sorted(files.items())
        if path != MANIFEST_NAME and path not in UNHASHED_TOP_LEVEL
    }


def hash_repository(repository: Path) -> dict[str, str]:
    """sha256 of every file under ``repository`` except manifest.json and runtime caches."""
    return {rel: sha256_file(repository / rel) for rel in repository_files(repository)}


def repository_files(repository: Path) -> Iterable[str]:
    """Every build file under ``repository``, as a sorted repository-relative POSIX path."""
    for path in sorted(repository.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(repository)
        if rel.as_posix() in (MANIFEST_NAME, *UNHASHED_TOP_LEVEL) or rel.name == f".{MANIFEST_NAME}.tmp":
            continue
        if any(part in _RUNTIME_ARTIFACTS for part in rel.parts) or rel.suffix in _RUNTIME_SUFFIXES:
            continue
        yield rel.as_posix()


def version_record(rel: str) -> bool:
    """A record kept beside a version's ensemble config (NAME_vN/manifest.json, validation.*, rollout-*.json)."""
    parts = rel.split("/")
    return len(parts) == 2 and (parts[1] in (MANIFEST_NAME, *UNHASHED_TOP_LEVEL) or
                                (parts[1].startswith("rollout-") and parts[1].endswith(".json")))


def role(rel: str) -> str:
    """What a file is to Triton, for messages."""
    name = PurePosixPath(rel).name
    if name.startswith("model.") and name.split(".")[-1] in {"onnx", "plan", "engine"}:
        return "model file"
    if name == "config.pbtxt":
        return "config"
    if name.endswith(".py"):
        return "code file"
    return "file"
