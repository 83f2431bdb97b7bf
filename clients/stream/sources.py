"""What the user names on the command line: a video file, a network stream (RTSP/RTSPS, HTTP, RTMP, SRT, UDP) or
a local camera, each with a stream name that is unique, short and free of credentials."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from clients.errors import ClientError

Kind = Literal["file", "network", "camera", "generated"]  # generated: frames a program hands over
NETWORK_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "srt", "udp", "tcp")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class SourceSpec:
    """One source: ``location`` is what the decoder opens; ``name`` is what every output line and metric says."""

    name: str
    location: str
    kind: Kind
    named: bool = False  # the user gave the name (NAME=LOCATION)

    @property
    def live(self) -> bool:
        """Live sources set their own pace and are reopened when they stop; a file ends (unless looped)."""
        return self.kind in ("network", "camera")

    @property
    def shown(self) -> str:
        """The location without credentials, for logs and summaries."""
        return redact(self.location)


def redact(location: str) -> str:
    """``rtsp://user:secret@cam/x`` -> ``rtsp://***@cam/x``: passwords never reach a log or a JSON line."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if "@" not in parts.netloc:
        return location
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _kind(location: str) -> Kind:
    scheme = location.partition("://")[0].lower() if "://" in location else ""
    if scheme in NETWORK_SCHEMES:
        return "network"
    if scheme:
        raise ClientError(f"unsupported source {redact(location)!r}: use a file, /dev/videoN, a camera index or "
                          f"one of {', '.join(s + '://' for s in NETWORK_SCHEMES)}")
    if location.isdigit() or re.fullmatch(r"/dev/video\d+", location):
        return "camera"
    return "file"


def _default_name(location: str, kind: Kind) -> str:
    if kind == "camera":
        return f"camera{location.rpartition('video')[2] if location.startswith('/dev/') else location}"
    if kind == "file":
        stem = Path(location).stem
    else:
        parts = urlsplit(location)
        stem = parts.path.strip("/").replace("/", "_") or parts.hostname or "stream"
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("_.-")[:64]
    return cleaned or "stream"


def parse_source(text: str) -> SourceSpec:
    """``[NAME=]LOCATION``; a camera index ``N`` means ``/dev/videoN``."""
    raw = text.strip()
    if not raw:
        raise ClientError("empty source: give a video file, an rtsp:// URL or a camera such as /dev/video0")
    name, sep, rest = raw.partition("=")
    explicit = bool(sep) and "://" not in name and "/" not in name and bool(rest)
    location = rest.strip() if explicit else raw
    if explicit and not _NAME.match(name):
        raise ClientError(f"bad stream name {name!r}: letters, digits, '.', '_' or '-', at most 64 characters")
    kind = _kind(location)
    if kind == "camera" and location.isdigit():
        location = f"/dev/video{location}"
    return SourceSpec(name=name if explicit else _default_name(location, kind), location=location, kind=kind,
                      named=explicit)


def parse_sources(texts: Sequence[str]) -> list[SourceSpec]:
    """Every source, with default names made unique (``name``, ``name-2``, ...); explicit duplicates are refused."""
    specs = [parse_source(text) for text in texts]
    explicit = [s.name for s in specs if s.named]
    duplicates = sorted({n for n in explicit if explicit.count(n) > 1})
    if duplicates:
        raise ClientError(f"stream name(s) given twice: {', '.join(duplicates)}")
    used: set[str] = set(explicit)
    unique: list[SourceSpec] = []
    for spec in specs:
        if not spec.named:
            candidate, n = spec.name, 2
            while candidate in used:
                candidate, n = f"{spec.name}-{n}", n + 1
            used.add(candidate)
            spec = replace(spec, name=candidate)
        unique.append(spec)
    missing = [s.location for s in unique if s.kind == "file" and not Path(s.location).is_file()]
    if missing:
        raise ClientError(f"video file not found: {', '.join(missing)}")
    return unique
