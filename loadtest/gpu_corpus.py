"""Encoded images for GPU-preprocess checks: one per accepted format and variant, and rejected ones.

Used by the GPU-path tests and by ``loadtest.gpu_probe`` on the device: real encodings from OpenCV, the EXIF,
Adobe and frame-header variants and the broken images built by hand.
"""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np


def encode(image: np.ndarray, ext: str, params: list[int] | None = None) -> bytes:
    ok, buf = cv2.imencode(ext, image, params or [])
    assert ok
    return buf.tobytes()


def scene(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients, edges and a little noise: JPEG-like content with no symmetry."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack([x * 255 / max(width - 1, 1), y * 255 / max(height - 1, 1),
                      128 + 100 * np.sin(x / 23 + y / 37)], axis=-1)
    for _ in range(6):
        cx, cy = rng.integers(0, width), rng.integers(0, height)
        radius = int(rng.integers(4, max(5, min(height, width) // 4)))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        cv2.circle(image, (int(cx), int(cy)), radius, color, -1)
    image += rng.normal(0, 4, image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def exif_app1(orientation: int) -> bytes:
    """APP1 segment with a big-endian TIFF IFD0 holding only the Orientation tag."""
    ifd = struct.pack(">H", 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">I", 0)
    payload = b"Exif\x00\x00" + b"MM\x00\x2a" + struct.pack(">I", 8) + ifd
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def with_exif(jpeg: bytes, orientation: int) -> bytes:
    return jpeg[:2] + exif_app1(orientation) + jpeg[2:]


def adobe_app14(transform: int) -> bytes:
    payload = b"Adobe" + struct.pack(">HHHB", 100, 0, 0, transform)
    return b"\xff\xee" + struct.pack(">H", len(payload) + 2) + payload


def with_segment(jpeg: bytes, segment: bytes) -> bytes:
    return jpeg[:2] + segment + jpeg[2:]


def patch_frame(jpeg: bytes, marker: int | None = None, precision: int | None = None,
                ids: tuple[int, ...] | None = None) -> bytes:
    """Rewrite the SOF marker, sample precision or component ids of a real JPEG (for routing only)."""
    data = bytearray(jpeg)
    pos = 2
    while True:
        kind = data[pos + 1]
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if 0xC0 <= kind <= 0xC2:
            if marker is not None:
                data[pos + 1] = marker
            if precision is not None:
                data[pos + 4] = precision
            for i, value in enumerate(ids or ()):
                data[pos + 10 + 3 * i] = value
            return bytes(data)
        pos += 2 + length


def zoo(seed: int = 0) -> dict[str, bytes]:
    """One encoded image per format and variant the ensemble accepts (see the README's contract)."""
    base = scene(96, 160, seed)
    bgra = np.dstack([base, np.full(base.shape[:2], 200, np.uint8)])
    return {
        "jpeg": encode(base, ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 90]),
        "jpeg-progressive": encode(base, ".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
        "jpeg-gray": encode(cv2.cvtColor(base, cv2.COLOR_BGR2GRAY), ".jpg"),
        "jpeg-444": encode(base, ".jpg", [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]),
        "jpeg-exif6": with_exif(encode(base, ".jpg"), 6),
        "jpeg-exif3": with_exif(encode(base, ".jpg"), 3),
        "png": encode(base, ".png"),
        "png-gray": encode(cv2.cvtColor(base, cv2.COLOR_BGR2GRAY), ".png"),
        "png-rgba": encode(bgra, ".png"),
        "png-16bit": encode(base.astype(np.uint16) * 257, ".png"),
        "bmp": encode(base, ".bmp"),
        "webp": encode(base, ".webp", [cv2.IMWRITE_WEBP_QUALITY, 90]),
        "webp-lossless": encode(base, ".webp", [cv2.IMWRITE_WEBP_QUALITY, 101]),
        "tiff": encode(base, ".tiff"),
    }


def bad_images(seed: int = 0) -> dict[str, bytes]:
    """Images the CPU path rejects, each for its own reason."""
    jpeg = encode(scene(64, 80, seed), ".jpg")
    png = encode(scene(64, 80, seed), ".png")
    ihdr = struct.pack(">IIBBBBB", 50000, 50000, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 4)) + chunk(b"IEND", b"")
    return {
        "empty": b"",
        "garbage": b"not an image at all, just some text",
        "truncated-jpeg": jpeg[: len(jpeg) // 2],
        "truncated-png": png[: len(png) // 2],
        "png-bomb": bomb,
        # The header checks pass, the decoder fails: a Huffman table whose code counts overflow.
        "jpeg-bad-huffman-table": corrupt_huffman_table(jpeg),
    }


def corrupt_huffman_table(jpeg: bytes) -> bytes:
    data = bytearray(jpeg)
    at = jpeg.index(b"\xff\xc4")
    data[at + 5 : at + 21] = b"\xff" * 16
    return bytes(data)


def corrupt_scan(jpeg: bytes) -> bytes:
    """Overwrite the start of the entropy-coded data: libjpeg warns and decodes the rest."""
    data = bytearray(jpeg)
    at = jpeg.index(b"\xff\xda")
    (length,) = struct.unpack(">H", jpeg[at + 2 : at + 4])
    data[at + 2 + length : at + 2 + length + 40] = b"\xff\x00" * 20
    return bytes(data)
