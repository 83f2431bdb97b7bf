"""Detect and strip the metadata header Ultralytics prepends to ``.engine`` files.

Ultralytics writes a 4-byte little-endian length, that many bytes of JSON metadata, then the
plan. Triton's TensorRT backend expects a bare plan and fails to deserialise such files
(ultralytics/ultralytics #18092, #20053), so plans are stripped before they enter a repository.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from generator.errors import ModelInspectionError

# Ultralytics metadata is a few hundred bytes to a few KB (class names); a real plan's first four
# bytes read as a length are either huge or not followed by a JSON object.
MAX_METADATA_BYTES = 16 << 20


class EngineHeaderError(ModelInspectionError):
    """A ``.engine``/``.plan`` file is empty or its Ultralytics header is malformed."""


def read_ultralytics_header(data: bytes) -> tuple[dict[str, Any], int] | None:
    """Return (metadata, plan offset) when ``data`` starts with an Ultralytics header, else None."""
    if len(data) < 6:
        return None
    length = int.from_bytes(data[:4], byteorder="little", signed=True)
    if length < 2 or length > MAX_METADATA_BYTES or 4 + length >= len(data):
        return None
    blob = data[4 : 4 + length]
    if blob[:1] != b"{":
        return None
    try:
        metadata = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(metadata, dict):
        return None
    return metadata, 4 + length


def strip_ultralytics_header(data: bytes) -> tuple[dict[str, Any] | None, bytes]:
    """Split ``data`` into (Ultralytics metadata or None, bare plan bytes)."""
    if not data:
        raise EngineHeaderError("the engine file is empty")
    header = read_ultralytics_header(data)
    if header is None:
        return None, data
    metadata, offset = header
    return metadata, data[offset:]


def load_plan(path: Path) -> tuple[dict[str, Any] | None, bytes]:
    """Read a ``.engine``/``.plan`` file and strip an Ultralytics header if there is one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EngineHeaderError(f"cannot read engine file {path}: {exc.strerror}") from exc
    try:
        return strip_ultralytics_header(data)
    except EngineHeaderError as exc:
        raise EngineHeaderError(f"{path}: {exc}") from exc
