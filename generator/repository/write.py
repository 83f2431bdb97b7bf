"""Write a model repository atomically: stage everything in a sibling temp dir, then swap it in.

A failed build leaves no half-written repository, and an existing directory this tool did not write is
never replaced without ``force``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from generator.errors import RepositoryWriteError
from generator.repository.manifest import MANIFEST_NAME
from generator.repository.versions import INDEX_NAME

# What this tool writes at the root of a repository: a build's manifest, a versioned repository's index.
MARKERS = (MANIFEST_NAME, INDEX_NAME)
# Files a checkout may keep in an otherwise empty repository folder.
_KEEP = (".gitignore", ".gitkeep")


def _is_replaceable(path: Path) -> bool:
    if not path.exists():
        return True
    if not path.is_dir():
        return False
    entries = [p.name for p in path.iterdir()]
    return any(name in entries for name in MARKERS) or all(name in _KEEP for name in entries)


def _write_files(root: Path, files: Mapping[str, bytes]) -> None:
    for relative, content in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def write_repository(output: Path, files: Mapping[str, bytes], force: bool = False) -> None:
    """Write ``files`` (relative path -> content) as the whole content of ``output``, in one rename."""
    output = output.resolve()
    _check_target(output, files, force)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.building-", dir=output.parent))
    except OSError as exc:
        raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
    backup = output.parent / f".{output.name}.previous"
    try:
        _write_files(staging, files)
        _swap_in(staging, output, backup)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if backup.exists() and not output.exists():
            backup.rename(output)
        if isinstance(exc, OSError):  # a user-fixable problem (permissions, disk full, a file in the way)
            raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
        raise
    if backup.exists():
        shutil.rmtree(backup) if backup.is_dir() else backup.unlink()


def update_repository(output: Path, add: Mapping[str, bytes], remove: Iterable[str] = (),
                      commit: str = INDEX_NAME) -> None:
    """Change a live repository in place: new model folders renamed in whole, changed files replaced one by one
    (each a rename: atomic), ``commit`` (the index) replaced last, then ``remove`` (top-level folders or files)
    deleted. A versioned repository's new version, promotion or prune.

    Not one rename of the whole tree, on purpose: Triton reloads every model whose folder looks modified when
    it next loads one that depends on it, so a fresh copy of the tree would reload every version in service.
    Until ``commit`` is replaced the index does not name what was added; a failure before that removes the
    folders this call renamed in.
    """
    output = output.resolve()
    _check_target(output, add, force=False)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.updating-", dir=output.parent))
    except OSError as exc:
        raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
    created: list[Path] = []
    try:
        _write_files(staging, add)
        for top in sorted({Path(rel).parts[0] for rel in add} - {commit}):
            if not (output / top).exists():
                (staging / top).rename(output / top)
                created.append(output / top)
                continue
            for rel in sorted(r for r in add if Path(r).parts[0] == top):
                (output / rel).parent.mkdir(parents=True, exist_ok=True)
                (staging / rel).replace(output / rel)
        if commit in add:
            (staging / commit).replace(output / commit)
    except BaseException as exc:
        for folder in created:
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, OSError):
            raise RepositoryWriteError(f"cannot update {output}: {exc}") from exc
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for top in remove:
        path = output / top
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _check_target(output: Path, files: Mapping[str, bytes], force: bool) -> None:
    if not _is_replaceable(output) and not force:
        raise RepositoryWriteError(
            f"{output} exists and was not written by this tool (no {MANIFEST_NAME}); "
            "choose another --output or pass --force to replace it"
        )
    if os.path.ismount(output):
        # A mount point cannot be renamed, and swapping its entries one by one is not atomic: a build
        # killed half-way would leave a mix of two repositories for Triton to load.
        raise RepositoryWriteError(
            f"{output} is a mount point, which cannot be replaced in one step; write to a folder inside it "
            f"(e.g. --output {output / 'repository'}) and point --model-repository there"
        )
    for relative in files:
        parts = Path(relative).parts
        if Path(relative).is_absolute() or ".." in parts or not parts:
            raise RepositoryWriteError(f"refusing to write outside the repository: {relative!r}")


def _swap_in(staging: Path, output: Path, backup: Path) -> None:
    """Keep a checkout's placeholder files, move the old repository aside, rename the new one in."""
    if output.is_dir():
        for name in _KEEP:
            if (output / name).exists():
                shutil.copy2(output / name, staging / name)
    if backup.exists():
        shutil.rmtree(backup)
    if output.exists():
        output.rename(backup)
    staging.rename(output)
