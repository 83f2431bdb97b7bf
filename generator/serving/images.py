"""Safe image decoding: reject hostile input from its header before any large allocation.

``cv2.imdecode`` trusts the header: a 68-byte PNG can declare 50000x50000 pixels and a small file can
decode to gigabytes. So the container's header is parsed here first (JPEG, PNG, BMP, WebP, TIFF), its
dimensions and the encoded size are checked against limits, and only then is the image decoded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cv2
import numpy as np

# OpenCV applies EXIF orientation in imdecode unless told not to; it also converts grayscale, alpha
# and 16-bit images to 8-bit BGR with IMREAD_COLOR.
_REDUCED_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                  8: cv2.IMREAD_REDUCED_COLOR_8}


# Real encoders write a few chunks to a few thousand (IDAT split every 8-64 KB); this bounds the walk.
_PNG_MAX_CHUNKS = 100_000


class ImageError(ValueError):
    """The encoded image is rejected; the message is safe to return to the client."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 32 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_side: int = 16384


DEFAULT_LIMITS = ImageLimits()


@dataclass(frozen=True)
class ImageHeader:
    format: str
    width: int
    height: int


def _jpeg_header(data: bytes) -> ImageHeader:
    # Walk the marker segments up to the first start-of-scan; SOFn holds the dimensions.
    pos, size, dims = 2, len(data), None
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            raise ImageError("corrupt JPEG: bad marker")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if length < 2 or pos + 2 + length > size:
            raise ImageError("truncated JPEG")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if length < 7:
                raise ImageError("corrupt JPEG: short frame header")
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            dims = (width, height)
        if marker == 0xDA:
            if dims is None:
                raise ImageError("corrupt JPEG: no frame header before the image data")
            # Entropy-coded data never contains FF D9, so a missing end marker means truncation. Searched
            # from the end, where it is: a forward search scans the whole scan (0.3-0.6 ms for a 1280x720 JPEG).
            if data.rfind(b"\xff\xd9", pos + 2 + length) < 0:
                raise ImageError("truncated JPEG: no end-of-image marker")
            return ImageHeader("jpeg", dims[0], dims[1])
        pos += 2 + length
    raise ImageError("truncated JPEG")


def _png_header(data: bytes) -> ImageHeader:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise ImageError("corrupt PNG: missing IHDR")
    width, height = struct.unpack(">II", data[16:24])
    # Walk the chunks up to IEND: each must fit in the data. OpenCV allocates what a chunk declares
    # before reading it, so a 7 KB PNG whose IDAT length says 2 GB costs 2 GB and a second to reject.
    pos = 8
    for _ in range(_PNG_MAX_CHUNKS):
        if pos + 12 > len(data):
            raise ImageError("truncated PNG: no IEND chunk")
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if pos + 12 + length > len(data):
            raise ImageError("truncated PNG: a chunk is longer than the remaining data")
        if data[pos + 4 : pos + 8] == b"IEND":
            return ImageHeader("png", width, height)
        pos += 12 + length
    raise ImageError(f"corrupt PNG: more than {_PNG_MAX_CHUNKS} chunks")


def _bmp_header(data: bytes) -> ImageHeader:
    if len(data) < 26:
        raise ImageError("truncated BMP")
    (declared_size,) = struct.unpack("<I", data[2:6])
    width, height = struct.unpack("<ii", data[18:26])
    if declared_size > len(data):
        raise ImageError("truncated BMP")
    return ImageHeader("bmp", abs(width), abs(height))


def _webp_header(data: bytes) -> ImageHeader:
    if len(data) < 30:
        raise ImageError("truncated WebP")
    (riff_size,) = struct.unpack("<I", data[4:8])
    if riff_size + 8 > len(data):
        raise ImageError("truncated WebP")
    chunk = data[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return ImageHeader("webp", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return ImageHeader("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return ImageHeader("webp", width, height)
    raise ImageError("corrupt WebP: unknown chunk")


def _tiff_header(data: bytes) -> ImageHeader:
    endian = "<" if data[:2] == b"II" else ">"
    try:
        (ifd,) = struct.unpack(endian + "I", data[4:8])
        (count,) = struct.unpack(endian + "H", data[ifd : ifd + 2])
        fields: dict[int, int] = {}
        for i in range(count):
            entry = data[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
            tag, kind = struct.unpack(endian + "HH", entry[:4])
            if tag in (256, 257):
                fmt = endian + ("H" if kind == 3 else "I")
                fields[tag] = struct.unpack(fmt, entry[8 : 8 + struct.calcsize(fmt)])[0]
    except struct.error as exc:
        raise ImageError("truncated TIFF") from exc
    if 256 not in fields or 257 not in fields:
        raise ImageError("corrupt TIFF: no image dimensions")
    return ImageHeader("tiff", fields[256], fields[257])


def read_header(data: bytes) -> ImageHeader:
    """Identify the format and read the declared dimensions without decoding."""
    if data[:3] == b"\xff\xd8\xff":
        return _jpeg_header(data)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _png_header(data)
    if data[:2] == b"BM":
        return _bmp_header(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_header(data)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff_header(data)
    raise ImageError("unsupported or unrecognised image format (expected JPEG, PNG, BMP, WebP or TIFF)")


def check_header(data: bytes, limits: ImageLimits) -> ImageHeader:
    """Validate size and declared dimensions against ``limits``; raise ``ImageError`` if hostile."""
    if len(data) == 0:
        raise ImageError("empty image: the request carried no bytes")
    if len(data) > limits.max_bytes:
        raise ImageError(f"encoded image is {len(data)} bytes, above the limit of {limits.max_bytes}")
    header = read_header(data)
    if header.width <= 0 or header.height <= 0:
        raise ImageError(f"{header.format} header declares an empty image ({header.width}x{header.height})")
    if max(header.width, header.height) > limits.max_side or header.width * header.height > limits.max_pixels:
        raise ImageError(
            f"{header.format} image declares {header.width}x{header.height} pixels, above the limit of "
            f"{limits.max_pixels} pixels / {limits.max_side} per side"
        )
    return header


def reduction_factor(header: ImageHeader, target: tuple[int, int]) -> int:
    """Largest JPEG DCT downscale (1, 2, 4, 8) whose result still covers the letterboxed image.

    libjpeg decodes at 1/2, 1/4 or 1/8 resolution for a fraction of the full cost (a 1280x720 frame for a
    640 input decodes straight to 640x360). The reduced image must be at least the size the letterbox
    resizes to, so nothing is ever upsampled.
    """
    if header.format != "jpeg":
        return 1
    ratio = min(target[0] / header.height, target[1] / header.width)
    needed_w, needed_h = round(header.width * ratio), round(header.height * ratio)
    factor = 1
    while factor < 8 and -(-header.width // (factor * 2)) >= needed_w and -(-header.height // (factor * 2)) >= needed_h:
        factor *= 2
    return factor


def decode_image(
    data: bytes,
    limits: ImageLimits = DEFAULT_LIMITS,
    target: tuple[int, int] | None = None,
) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode to an 8-bit BGR H x W x 3 array, EXIF orientation applied.

    Returns the image and the (width, height) of the full-resolution source, which differs from the
    array's size when ``target`` = (height, width) allows a reduced-resolution JPEG decode.
    """
    header = check_header(data, limits)
    factor = reduction_factor(header, target) if target is not None else 1
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), _REDUCED_FLAGS[factor])
    if image is None:
        raise ImageError(f"could not decode the {header.format} image (corrupt or truncated data)")
    height, width = image.shape[:2]
    if factor == 1 or (width, height) in ((header.width, header.height), (header.height, header.width)):
        return image, (width, height)
    # EXIF rotation by 90/270 degrees swaps the axes of the decoded image relative to the header.
    rotated = (height > width) != (header.height > header.width)
    source = (header.height, header.width) if rotated else (header.width, header.height)
    return image, source
