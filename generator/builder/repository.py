"""Write a model repository atomically: stage everything in a sibling temp dir, then swap it in.

A failed build leaves no half-written repository, and an existing directory this tool did not write is
never replaced without ``force``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
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


def _write_into_mount(output: Path, files: Mapping[str, bytes]) -> None:
    """A volume's mount point cannot be renamed (containers mount the repository at /models).

    Stage inside it, then swap its entries by renames on the same filesystem; on failure the previous
    entries are moved back. No server should read the repository while this runs (the compose builder
    runs before Triton starts).
    """
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=output))
    backup = Path(tempfile.mkdtemp(prefix=".previous-", dir=output))
    ours = {staging.name, backup.name}
    moved: list[str] = []
    placed: list[str] = []
    try:
        _write_files(staging, files)
        for entry in list(output.iterdir()):
            if entry.name not in ours and entry.name not in _KEEP:
                entry.rename(backup / entry.name)
                moved.append(entry.name)
        for entry in list(staging.iterdir()):
            entry.rename(output / entry.name)
            placed.append(entry.name)
    except BaseException:
        for name in placed:
            target = output / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        for name in moved:
            (backup / name).rename(output / name)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(backup, ignore_errors=True)


def write_repository(output: Path, files: Mapping[str, bytes], force: bool = False) -> None:
    """Write ``files`` (relative path -> content) as the whole content of ``output``."""
    output = output.resolve()
    if not _is_replaceable(output) and not force:
        raise RepositoryWriteError(
            f"{output} exists and was not written by this tool (no {MARKER}); "
            "choose another --output or pass --force to replace it"
        )
    for relative in files:
        parts = Path(relative).parts
        if Path(relative).is_absolute() or ".." in parts or not parts:
            raise RepositoryWriteError(f"refusing to write outside the repository: {relative!r}")
    if os.path.ismount(output):
        try:
            _write_into_mount(output, files)
        except OSError as exc:
            raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.building-", dir=output.parent))
    except OSError as exc:
        raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
    backup = output.parent / f".{output.name}.previous"
    try:
        _write_files(staging, files)
        if output.is_dir():
            for name in _KEEP:
                if (output / name).exists():
                    shutil.copy2(output / name, staging / name)
        if backup.exists():
            shutil.rmtree(backup)
        if output.exists():
            output.rename(backup)
        staging.rename(output)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if backup.exists() and not output.exists():
            backup.rename(output)
        if isinstance(exc, OSError):  # a user-fixable problem (permissions, disk full, a file in the way)
            raise RepositoryWriteError(f"cannot write {output}: {exc}") from exc
        raise
    if backup.exists():
        shutil.rmtree(backup) if backup.is_dir() else backup.unlink()
