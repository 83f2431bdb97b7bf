"""Bad images the ensemble must refuse one request at a time while it keeps serving the rest.

The soak mixes them into steady traffic: each one must fail fast with its own message, and none may leave
memory, file descriptors or shared memory behind. The decompression bombs are real headers: a 68-byte PNG
and a small JPEG whose frame header declares tens of thousands of pixels per side.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .errors import CorpusError
from .images import synthetic_images


@dataclass(frozen=True)
class BadImage:
    kind: str
    data: bytes
    expected: str  # part of the server's error message for it


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_declaring(width: int, height: int) -> bytes:
    """A complete, tiny PNG whose header declares ``width`` x ``height`` RGB pixels."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(b"\0"))
            + _png_chunk(b"IEND", b""))


def jpeg_declaring(jpeg: bytes, width: int, height: int) -> bytes:
    """``jpeg`` with the dimensions in its frame header (SOF0-SOF2) replaced."""
    pos = 2
    while pos + 9 <= len(jpeg) and jpeg[pos] == 0xFF:
        marker = jpeg[pos + 1]
        (length,) = struct.unpack(">H", jpeg[pos + 2 : pos + 4])
        if 0xC0 <= marker <= 0xC2:
            return jpeg[: pos + 5] + struct.pack(">HH", height, width) + jpeg[pos + 9 :]
        pos += 2 + length
    raise CorpusError("no baseline or progressive frame header in the JPEG")


def bad_images() -> list[BadImage]:
    """One of each kind the soak sends: truncated, garbage, and two decompression-bomb headers."""
    (jpeg,) = synthetic_images([(640, 480)], per_size=1, seed=7)
    return [
        BadImage("truncated_jpeg", jpeg[: len(jpeg) // 2], "truncated JPEG"),
        BadImage("garbage", bytes(range(256)) * 4, "unsupported or unrecognised image format"),
        BadImage("png_bomb_header", png_declaring(50000, 50000), "declares 50000x50000 pixels"),
        BadImage("jpeg_bomb_header", jpeg_declaring(jpeg, 30000, 30000), "declares 30000x30000 pixels"),
    ]
