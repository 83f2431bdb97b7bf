"""Safe image decoding: reject hostile input from its header before any large allocation.

``cv2.imdecode`` trusts the header: a 68-byte PNG can declare 50000x50000 pixels and a small file can
decode to gigabytes. So the container's header is parsed here first (JPEG, PNG, BMP, WebP, TIFF), its
dimensions and the encoded size are checked against limits, and only then is the image decoded.

Triton has no execution timeout for Python models, so the work one image costs is bounded here too: a
progressive JPEG may hold only so many scans (each one is another pass over the whole image), and an
optional decode budget rejects an image whose estimated decode time alone would blow the latency target.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

# OpenCV applies EXIF orientation in imdecode unless told not to; it also converts grayscale, alpha
# and 16-bit images to 8-bit BGR with IMREAD_COLOR.
_REDUCED_FLAGS = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                  8: cv2.IMREAD_REDUCED_COLOR_8}


# Real encoders write a few chunks to a few thousand (IDAT split every 8-64 KB); this bounds the walk.
_PNG_MAX_CHUNKS = 100_000

# A JPEG marker inside or after entropy-coded data: 0xFF not followed by 0x00 (byte stuffing), a restart
# marker (0xD0-0xD7) or another 0xFF (fill).
_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_JPEG_PROGRESSIVE_SOF = (0xC2, 0xC6, 0xCA, 0xCE)

# Decode cost per pixel relative to a baseline JPEG decoded at full resolution (OpenCV 4.11, one thread,
# measured on the project's 2-core machine and rounded up). JPEG's reduced decode still entropy-decodes
# every coefficient, so it saves less than the pixel count suggests; every progressive scan is another
# pass over the coefficients.
_FORMAT_COST = {"jpeg": 1.0, "png": 4.0, "webp": 2.5, "tiff": 3.0, "bmp": 0.2}
_REDUCED_JPEG_COST = {1: 1.0, 2: 0.5, 4: 0.4, 8: 0.35}
_PROGRESSIVE_SCAN_COST = 0.15


class ImageError(ValueError):
    """The encoded image is rejected; the message is safe to return to the client.

    ``reason`` is the label the preprocess step counts the rejection under (``ensemble_rejected_images_total``);
    each subclass below is one reason, so every check names its reason where it raises.
    """

    reason = "other"


class EmptyImageError(ImageError):
    reason = "empty"


class ImageFormatError(ImageError):
    """Unsupported format, or a header or data that is corrupt."""

    reason = "format"


class TruncatedImageError(ImageError):
    reason = "truncated"


class ImageTooLargeError(ImageError):
    """More bytes, pixels or pixels per side than the limits allow."""

    reason = "too_large"


class DecodeBudgetError(ImageError):
    """Decoding would cost more than allowed: too many progressive scans, or over the decode-time budget."""

    reason = "decode_budget"


@dataclass(frozen=True)
class DecodeBudget:
    """Reject an image whose estimated decode time exceeds ``max_ms`` on this machine.

    ``ms_per_megapixel`` is the machine's full-resolution baseline JPEG decode speed
    (``measure_decode_speed``); other formats and reduced or progressive JPEG decodes are scaled from it.
    """

    max_ms: float
    ms_per_megapixel: float


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 32 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_side: int = 16384
    # Baseline JPEGs have one scan, progressive ones about ten (libjpeg's default script) to a few dozen.
    max_jpeg_scans: int = 64
    decode_budget: DecodeBudget | None = None


DEFAULT_LIMITS = ImageLimits()


@dataclass(frozen=True)
class ImageHeader:
    format: str
    width: int
    height: int
    scans: int = 1  # JPEG: start-of-scan markers up to the end of the image
    progressive: bool = False


def jpeg_segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, position, length) of each marker segment up to and including the first start-of-scan.

    Raises ``ImageError`` on bytes that are not a sequence of marker segments, or that end before a scan.
    """
    pos, size = 2, len(data)
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            raise ImageFormatError("corrupt JPEG: bad marker")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if length < 2 or pos + 2 + length > size:
            raise TruncatedImageError("truncated JPEG")
        yield marker, pos, length
        if marker == 0xDA:
            return
        pos += 2 + length
    raise TruncatedImageError("truncated JPEG")


def is_frame_marker(marker: int) -> bool:
    """SOF0-SOF15, the segments that hold the dimensions (C4, C8 and CC are tables, not frames)."""
    return 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC)


def _jpeg_header(data: bytes, max_scans: int) -> ImageHeader:
    frame = None
    for marker, pos, length in jpeg_segments(data):
        if is_frame_marker(marker):
            frame = _jpeg_frame(data, pos, length, marker)
        elif marker == 0xDA:
            if frame is None:
                raise ImageFormatError("corrupt JPEG: no frame header before the image data")
            return _jpeg_scans(data, pos, length, frame, max_scans)
    raise TruncatedImageError("truncated JPEG")  # jpeg_segments ends with a start-of-scan or raises


@dataclass(frozen=True)
class _JpegFrame:
    width: int
    height: int
    progressive: bool
    components: int


def _jpeg_frame(data: bytes, pos: int, length: int, marker: int) -> _JpegFrame:
    """The start-of-frame segment at ``pos``: dimensions, coding and component count."""
    if length < 8:
        raise ImageFormatError("corrupt JPEG: short frame header")
    height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
    return _JpegFrame(width, height, marker in _JPEG_PROGRESSIVE_SOF, data[pos + 9])


def _jpeg_scans(data: bytes, pos: int, length: int, frame: _JpegFrame, max_scans: int) -> ImageHeader:
    """The header, from the first start-of-scan segment at ``pos`` on."""
    if length < 3:
        raise ImageFormatError("corrupt JPEG: short scan header")
    scan_data = pos + 2 + length
    if frame.progressive or data[pos + 4] < frame.components:  # more than one scan: count them
        scans = _count_scans(data, scan_data, max_scans)
        return ImageHeader("jpeg", frame.width, frame.height, scans, frame.progressive)
    # One interleaved scan: libjpeg refuses a second one ("Didn't expect more than one scan").
    # Entropy-coded data never contains FF D9, so a missing end marker means truncation. Searched
    # from the end, where it is: a forward search scans the whole scan (0.3-0.6 ms for a 1280x720 JPEG).
    if data.rfind(b"\xff\xd9", scan_data) < 0:
        raise TruncatedImageError("truncated JPEG: no end-of-image marker")
    return ImageHeader("jpeg", frame.width, frame.height)


def _count_scans(data: bytes, pos: int, max_scans: int) -> int:
    """Count the scans from the first scan's entropy-coded data at ``pos`` to the end-of-image marker.

    Each progressive scan makes libjpeg pass over every coefficient again, and it only warns about a
    scan that repeats an earlier one, so a few kilobytes of repeated scans cost seconds. Counting start-
    of-scan markers first is cheap: entropy-coded data never contains a marker, and segments between
    scans are skipped by their length. Every loop step consumes one marker, and the markers are bounded.
    """
    scans, markers_left = 1, 4 * max_scans + 64  # a table or two before each scan, some metadata
    while True:
        found = _JPEG_MARKER.search(data, pos)
        if found is None:  # entropy-coded data never holds FF D9, so no end marker means truncation
            raise TruncatedImageError("truncated JPEG: no end-of-image marker")
        start, marker = found.start(), data[found.start() + 1]
        if marker == 0xD9:
            return scans
        markers_left -= 1
        if markers_left < 0:
            raise ImageFormatError("corrupt JPEG: too many markers between scans")
        if marker in (0xD8, 0x01):  # markers without a length
            pos = start + 2
            continue
        if start + 4 > len(data):
            raise TruncatedImageError("truncated JPEG: no end-of-image marker")
        if marker == 0xDA:
            scans += 1
            if scans > max_scans:
                raise DecodeBudgetError(f"jpeg image has more than {max_scans} scans, above the limit of {max_scans} "
                                 "(progressive JPEGs usually have about 10)")
        pos = start + 2 + struct.unpack(">H", data[start + 2 : start + 4])[0]


def _png_header(data: bytes) -> ImageHeader:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise ImageFormatError("corrupt PNG: missing IHDR")
    width, height = struct.unpack(">II", data[16:24])
    # Walk the chunks up to IEND: each must fit in the data. OpenCV allocates what a chunk declares
    # before reading it, so a 7 KB PNG whose IDAT length says 2 GB costs 2 GB and a second to reject.
    pos = 8
    for _ in range(_PNG_MAX_CHUNKS):
        if pos + 12 > len(data):
            raise TruncatedImageError("truncated PNG: no IEND chunk")
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if pos + 12 + length > len(data):
            raise TruncatedImageError("truncated PNG: a chunk is longer than the remaining data")
        if data[pos + 4 : pos + 8] == b"IEND":
            return ImageHeader("png", width, height)
        pos += 12 + length
    raise ImageFormatError(f"corrupt PNG: more than {_PNG_MAX_CHUNKS} chunks")


def _bmp_header(data: bytes) -> ImageHeader:
    if len(data) < 26:
        raise TruncatedImageError("truncated BMP")
    (declared_size,) = struct.unpack("<I", data[2:6])
    width, height = struct.unpack("<ii", data[18:26])
    if declared_size > len(data):
        raise TruncatedImageError("truncated BMP")
    return ImageHeader("bmp", abs(width), abs(height))


def _webp_header(data: bytes) -> ImageHeader:
    if len(data) < 30:
        raise TruncatedImageError("truncated WebP")
    (riff_size,) = struct.unpack("<I", data[4:8])
    if riff_size + 8 > len(data):
        raise TruncatedImageError("truncated WebP")
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
    raise ImageFormatError("corrupt WebP: unknown chunk")


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
        raise TruncatedImageError("truncated TIFF") from exc
    if 256 not in fields or 257 not in fields:
        raise ImageFormatError("corrupt TIFF: no image dimensions")
    return ImageHeader("tiff", fields[256], fields[257])


def read_header(data: bytes, max_jpeg_scans: int = DEFAULT_LIMITS.max_jpeg_scans) -> ImageHeader:
    """Identify the format and read the declared dimensions (and a JPEG's scans) without decoding."""
    if data[:3] == b"\xff\xd8\xff":
        return _jpeg_header(data, max_jpeg_scans)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _png_header(data)
    if data[:2] == b"BM":
        return _bmp_header(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_header(data)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff_header(data)
    raise ImageFormatError("unsupported or unrecognised image format (expected JPEG, PNG, BMP, WebP or TIFF)")


def check_header(data: bytes, limits: ImageLimits) -> ImageHeader:
    """Validate size and declared dimensions against ``limits``; raise ``ImageError`` if hostile."""
    if len(data) == 0:
        raise EmptyImageError("empty image: the request carried no bytes")
    if len(data) > limits.max_bytes:
        raise ImageTooLargeError(f"encoded image is {len(data)} bytes, above the limit of {limits.max_bytes}")
    header = read_header(data, limits.max_jpeg_scans)
    if header.width <= 0 or header.height <= 0:
        raise ImageFormatError(f"{header.format} header declares an empty image ({header.width}x{header.height})")
    if max(header.width, header.height) > limits.max_side or header.width * header.height > limits.max_pixels:
        raise ImageTooLargeError(
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


def decode_cost_megapixels(header: ImageHeader, factor: int = 1) -> float:
    """Estimated decode work, in megapixels of full-resolution baseline JPEG."""
    megapixels = header.width * header.height / 1e6
    if header.format != "jpeg":
        return megapixels * _FORMAT_COST.get(header.format, max(_FORMAT_COST.values()))
    cost = _REDUCED_JPEG_COST[factor]
    if header.progressive:
        cost += _PROGRESSIVE_SCAN_COST * header.scans
    return megapixels * cost


def measure_decode_speed(runs: int = 5) -> float:
    """This machine's full-resolution baseline JPEG decode time, in ms per megapixel.

    Measured on a 1280x720 frame with sensor-like noise (about 350 KB at quality 90, like a camera frame;
    a clean synthetic image decodes twice as fast). The fastest of a few runs: a machine that is busy for a
    moment must not tighten the budget for good.
    """
    import time

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:720, 0:1280]
    gradient = np.stack([x * 255 // 1279, y * 255 // 719, (x + y) % 256], axis=-1)
    frame = np.clip(gradient + rng.normal(0.0, 12.0, gradient.shape), 0, 255).astype(np.uint8)
    encoded = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 90])[1]
    fastest = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        cv2.imdecode(encoded, cv2.IMREAD_COLOR)
        fastest = min(fastest, time.perf_counter() - start)
    return fastest * 1000 / (1280 * 720 / 1e6)


def check_decode_budget(header: ImageHeader, factor: int, budget: DecodeBudget) -> None:
    """Raise ``ImageError`` if decoding would take longer than the budget allows, before any decoding."""
    estimate_ms = decode_cost_megapixels(header, factor) * budget.ms_per_megapixel
    if estimate_ms > budget.max_ms:
        raise DecodeBudgetError(
            f"{header.format} image of {header.width}x{header.height} pixels would take about "
            f"{estimate_ms:.0f} ms to decode, above the budget of {budget.max_ms:.0f} ms per image; "
            "send it downscaled"
        )


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
    if limits.decode_budget is not None:
        check_decode_budget(header, factor, limits.decode_budget)
    try:
        image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), _REDUCED_FLAGS[factor])
    except cv2.error as exc:  # e.g. OPENCV_IO_MAX_IMAGE_PIXELS: the image alone fails, not its batch
        raise ImageError(f"could not decode the {header.format} image: the decoder refused it "
                         f"(check failed: {_cv_reason(exc)})") from exc
    if image is None:
        raise ImageFormatError(f"could not decode the {header.format} image (corrupt or truncated data)")
    height, width = image.shape[:2]
    if factor == 1 or (width, height) in ((header.width, header.height), (header.height, header.width)):
        return image, (width, height)
    # EXIF rotation by 90/270 degrees swaps the axes of the decoded image relative to the header.
    rotated = (height > width) != (header.height > header.width)
    source = (header.height, header.width) if rotated else (header.width, header.height)
    return image, source


def _cv_reason(exc: cv2.error) -> str:
    """The failed check of an OpenCV error, without the build paths it carries."""
    text = str(exc).strip()
    failed = re.search(r"\(-\d+:[^)]*\) ([^\n]*?) in function", text)
    return failed.group(1) if failed else "decoder error"
