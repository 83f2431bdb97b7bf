"""An archive as one file or as numbered parts: writing the parts, finding them all, reading them as one stream.

Parts are named ``NAME.001-of-009`` ... ``NAME.009-of-009``: a plain ``cat NAME.0* > NAME`` joins them, and the
reader, given any one part, knows how many there must be, names the one that is missing, and refuses a part
whose size is not the size every part but the last has (a truncated copy) before reading a byte of it.
Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

from generator.errors import ServerError

_PART = re.compile(r"^(?P<stem>.+)\.(?P<index>\d{3})-of-(?P<count>\d{3})$")
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def parse_size(text: str) -> int:
    """Bytes of ``55M`` (MiB), ``800K`` (KiB), ``2G`` (GiB) or a plain number, as ``split -b`` reads them."""
    match = _SIZE.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise ServerError(f"a part size is a positive number with an optional K, M or G (as 55M), not {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def part_name(stem: str, index: int, count: int) -> str:
    return f"{stem}.{index:03d}-of-{count:03d}"


def split_file(path: Path, part_bytes: int) -> list[Path]:
    """Cut ``path`` into numbered parts beside it (removing ``path``); one file stays one file."""
    size = path.stat().st_size
    count = max(1, -(-size // part_bytes))
    if count == 1:
        return [path]
    if count > 999:
        raise ServerError(f"{path.name} would make {count} parts of {part_bytes} bytes; choose a larger --split")
    parts = []
    with path.open("rb") as source:
        for index in range(1, count + 1):
            target = path.with_name(part_name(path.name, index, count))
            with target.open("wb") as sink:
                left = part_bytes
                while left and (chunk := source.read(min(CHUNK, left))):
                    sink.write(chunk)
                    left -= len(chunk)
            parts.append(target)
    path.unlink()
    return parts


def find_parts(given: Path) -> list[Path]:
    """Every part of the archive ``given`` belongs to, in order; a whole archive is its own one part."""
    if not given.is_file():
        raise ServerError(f"archive not found: {given}")
    match = _PART.match(given.name)
    if match is None:
        return [given]
    stem, count = match.group("stem"), int(match.group("count"))
    parts = [given.with_name(part_name(stem, index, count)) for index in range(1, count + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise ServerError(f"the archive is incomplete: part {', '.join(missing)} is missing beside {given.name} "
                          f"(all {count} parts must be in {given.parent})")
    full = max(part.stat().st_size for part in parts[:-1]) if count > 1 else parts[0].stat().st_size
    for part in parts[:-1]:
        if part.stat().st_size != full:
            raise ServerError(f"part {part.name} has {part.stat().st_size} bytes where every part but the last "
                              f"has {full}: a truncated or damaged copy; copy it again")
    if parts[-1].stat().st_size > full:
        raise ServerError(f"part {parts[-1].name} is larger than the others: it does not belong to this archive")
    return parts


def checksum_file(parts: list[Path]) -> Path:
    """The ``sha256sum`` listing of an archive's parts (or its one file), beside them: ``NAME.sha256``. Small enough
    to carry or sign apart from the archive; ``sha256sum -c`` reads it too."""
    lines = [f"{sha256_file(part)}  {part.name}\n" for part in parts]
    listing = parts[0].with_name(f"{_stem(parts[0])}.sha256")
    listing.write_text("".join(lines), encoding="utf-8")
    return listing


def check_checksums(parts: list[Path]) -> Path | None:
    """Every part against ``NAME.sha256`` beside it, where there is one (None where there is not); a part whose
    sha256 differs, or that the listing does not name, is refused by name."""
    listing = parts[0].with_name(f"{_stem(parts[0])}.sha256")
    if not listing.is_file():
        return None
    wanted = {}
    for line in listing.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition(" ")
        wanted[name.strip().lstrip("*")] = digest  # sha256sum writes "*NAME" in binary mode
    for part in parts:
        found = sha256_file(part)
        if found != wanted.get(part.name):
            raise ServerError(f"part {part.name} has sha256 {found}, {listing.name} says {wanted.get(part.name)}: it "
                              "was altered or damaged; copy it again")
    return listing


def _stem(path: Path) -> str:
    match = _PART.match(path.name)
    return match.group("stem") if match else path.name


class PartsReader(io.RawIOBase):
    """The parts, read in order as one stream (for ``tarfile`` in stream mode)."""

    def __init__(self, parts: list[Path]) -> None:
        super().__init__()
        self._parts: Iterator[Path] = iter(parts)
        self._current: io.BufferedReader | None = None
        self.current_name = ""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:
            if self._current is None:
                part = next(self._parts, None)
                if part is None:
                    return 0
                self._current, self.current_name = part.open("rb"), part.name
            count = self._current.readinto(buffer)
            if count:
                return count
            self._current.close()
            self._current = None

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
        super().close()
