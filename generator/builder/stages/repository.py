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

MARKER = "manifest.json"
# Files a checkout may keep in an otherwise empty repository folder.
_KEEP = (".gitignore", ".gitkeep")


def _is_replaceable(path: Path) -> bool:
    if not path.exists():
        return True
    if not path.is_dir():
        return False
    entries = [p.name for p in path.iterdir()]
    return (MARKER in entries) or all(name in _KEEP for name in entries)


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


def update_repository(output: Path, add: Mapping[str, bytes], remove: Iterable[str] = ()) -> None:
    """Add, replace and remove files of an existing repository in one rename: a versioned repository's new
    version, promotion or prune. Files that stay are hard links (copies where the file system has none) in
    the staged tree, so a large plan costs nothing to keep; ``remove`` names top-level model folders.
    """
    output = output.resolve()
    _check_target(output, add, force=False)
    gone = set(remove)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.updating-", dir=output.parent))
    except OSError as exc:
        raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
    backup = output.parent / f".{output.name}.previous"
    try:
        for source in sorted(output.rglob("*")):
            relative = source.relative_to(output)
            if not source.is_file() or relative.parts[0] in gone or relative.as_posix() in add:
                continue
            _link_or_copy(source, staging / relative)
        _write_files(staging, add)
        _swap_in(staging, output, backup)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if backup.exists() and not output.exists():
            backup.rename(output)
        if isinstance(exc, OSError):
            raise RepositoryWriteError(f"cannot update {output}: {exc}") from exc
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _check_target(output: Path, files: Mapping[str, bytes], force: bool) -> None:
    if not _is_replaceable(output) and not force:
        raise RepositoryWriteError(
            f"{output} exists and was not written by this tool (no {MARKER}); "
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
