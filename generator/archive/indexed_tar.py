"""A tar whose first member is a JSON index of every other member's size and sha256, read back verified.

Both offline archives are one: the embedded server's (offline.py, ``python -m generator archive``) and the
deployed stack's site archive (deploy/local/site_archive.py, ``python -m deploy archive``). Writing puts the index
first, then the files, uncompressed (``docker save`` tars and wheels are compressed or packed already). Reading
streams the archive once, from one file or from all its parts (archive_parts.py), into a folder: the index first,
then each member copied while its sha256 is taken, and the reading stops at the first member that is not a plain
file the index lists (once), whose bytes differ from the index, that ends early, or that is missing at the end.
The caller decides what the index must say and how a refusal reads; nothing is used until everything passed.
Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.archive.parts import CHUNK, PartsReader, find_parts, sha256_file, split_file

INDEX_LIMIT = 1 << 22  # an index larger than 4 MiB is not one of ours


def file_entries(members: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """The index's ``files``: every member's size and sha256."""
    return {name: {"size": path.stat().st_size, "sha256": sha256_file(path)} for name, path in members.items()}


def write_indexed_tar(path: Path, index_name: str, index: Mapping[str, Any], members: Mapping[str, Path]) -> None:
    """``index`` as ``index_name`` first, then ``members`` (archive name -> file), in that order."""
    data = json.dumps(index, indent=1, sort_keys=True).encode()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(index_name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        for name, source in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = source.stat().st_size, 0o644
            with source.open("rb") as handle:
                tar.addfile(info, handle)


def members_of(root: Path) -> dict[str, Path]:
    """Every file under ``root`` by its archive name (the path below ``root``), sorted."""
    return {path.relative_to(root).as_posix(): path for path in sorted(root.rglob("*")) if path.is_file()}


def publish(staged: Path, output: Path, index_name: str, index: Mapping[str, Any], members: Mapping[str, Path],
            split_bytes: int | None = None) -> list[Path]:
    """Write the archive at ``staged`` (in a folder of its own), then rename it whole into ``output`` over an older
    one or its parts, and split it there where asked: the archive, or its parts."""
    write_indexed_tar(staged, index_name, index, members)
    final = output / staged.name
    for old in [final, final.with_name(f"{final.name}.sha256"), *output.glob(f"{final.name}.*-of-*")]:
        old.unlink(missing_ok=True)
    staged.rename(final)
    return split_file(final, split_bytes) if split_bytes else [final]


@dataclass(frozen=True)
class IndexedTar:
    """What one kind of archive is: its index's name and format, which member names it may hold, whose
    command makes it (for the refusal of a file that is not one), and how a refusal reads."""

    index_name: str
    format: int
    member_ok: Callable[[str], object]  # truthy for a name it may hold
    made_by: str
    refuse: Callable[[str, str], Exception]  # (archive name, problem) -> the exception raised

    def read_index(self, tar: tarfile.TarFile, name: str) -> dict[str, Any]:
        first = tar.next()
        if first is None or first.name != self.index_name or not first.isfile() or first.size > INDEX_LIMIT:
            raise self.refuse(name, f"it does not start with {self.index_name} (not an archive of {self.made_by})")
        handle = tar.extractfile(first)
        try:
            index = json.loads(handle.read() if handle else b"")
        except ValueError:
            raise self.refuse(name, f"its {self.index_name} is not valid JSON") from None
        if not isinstance(index, dict) or index.get("format") != self.format or not isinstance(index.get("files"),
                                                                                                  dict):
            raise self.refuse(name, f"its {self.index_name} is not format {self.format}")
        return index

    def copy_member(self, tar: tarfile.TarFile, member: tarfile.TarInfo, expected: Mapping[str, Any], root: Path,
                    name: str) -> None:
        if not member.isfile() or not self.member_ok(member.name) or ".." in member.name.split("/"):
            raise self.refuse(name, f"it holds {member.name!r}, which is not a file the index lists")
        target = root / member.name
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        source = tar.extractfile(member)
        assert source is not None  # a regular file
        with target.open("wb") as sink:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                sink.write(chunk)
        if member.size != expected.get("size") or digest.hexdigest() != expected.get("sha256"):
            raise self.refuse(name, f"{member.name} has sha256 {digest.hexdigest()} ({member.size} bytes), the index "
                                    f"says {expected.get('sha256')} ({expected.get('size')} bytes): it was altered or "
                                    "damaged")

    def read_verified(self, given: Path, root: Path,
                      check_index: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Read the archive (one file or the parts ``given`` belongs to) into ``root``; its index, once every
        listed member is there with its size and sha256. ``check_index`` may refuse before a member is read."""
        parts = find_parts(given)
        name = given.name
        reader = PartsReader(parts)
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                index = self.read_index(tar, name)
                if check_index is not None:
                    check_index(index)
                seen: set[str] = set()
                while (member := tar.next()) is not None:  # iterating the TarFile would start over
                    expected = index["files"].get(member.name)
                    if expected is None or member.name in seen:
                        raise self.refuse(name, f"it holds {member.name!r}, which its index does not list (once)")
                    self.copy_member(tar, member, expected, root, name)
                    seen.add(member.name)
        except (tarfile.TarError, EOFError, OSError) as exc:
            where = f" in {reader.current_name}" if reader.current_name else ""
            raise self.refuse(name, f"it is truncated or damaged{where} ({exc})") from None
        missing = sorted(set(index["files"]) - seen)
        if missing:
            raise self.refuse(name, f"it is partial: {len(missing)} listed file(s) missing, first {missing[0]}")
        return index
