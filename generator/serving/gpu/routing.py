"""Which images the GPU decoder takes: decided from the bytes, before anything is decoded.

nvImageCodec's GPU decoders (the JPEG engine and CUDA nvJPEG) take 8-bit Huffman JPEGs in YCbCr or
grayscale. Everything else (PNG, BMP, WebP, TIFF, CMYK/YCCK or RGB-coded JPEGs, 12-bit, lossless or
arithmetic-coded JPEGs) goes to the CPU path, where OpenCV decodes it exactly as without a GPU. The header
has already passed ``check_header`` when these functions run; they still never raise on odd bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._cpu import ImageError, ImageHeader, is_frame_marker, jpeg_segments

# SOF0 baseline, SOF1 extended sequential, SOF2 progressive: Huffman-coded, what nvJPEG decodes.
_GPU_FRAMES = (0xC0, 0xC1, 0xC2)
# EXIF orientations 5-8 transpose the image: the decoded width is the stored height.
TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)


@dataclass(frozen=True)
class JpegFrame:
    """What the frame header and the application segments say about a JPEG."""

    marker: int  # 0xC0 + n of the SOFn segment
    precision: int  # bits per sample
    components: int
    component_ids: tuple[int, ...]
    adobe_transform: int | None  # APP14 "Adobe" colour transform: 0 none (RGB/CMYK), 1 YCbCr, 2 YCCK
    orientation: int  # EXIF orientation, 1 when absent or unreadable


def _exif_orientation(payload: bytes) -> int:
    """Orientation tag (0x0112) of IFD0 in an APP1 "Exif" payload; 1 when absent or malformed."""
    tiff = payload[6:]
    if tiff[:4] not in (b"II*\x00", b"MM\x00*"):
        return 1
    endian = "<" if tiff[:2] == b"II" else ">"
    try:
        (ifd,) = struct.unpack(endian + "I", tiff[4:8])
        (count,) = struct.unpack(endian + "H", tiff[ifd : ifd + 2])
        for i in range(count):
            entry = tiff[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
            tag, kind = struct.unpack(endian + "HH", entry[:4])
            if tag == 0x0112 and kind == 3:
                (value,) = struct.unpack(endian + "H", entry[8:10])
                return value if 1 <= value <= 8 else 1
    except struct.error:
        return 1
    return 1


def jpeg_frame(data: bytes) -> JpegFrame | None:
    """Read the segments up to the first start-of-scan; ``None`` when they do not parse."""
    marker_of_frame: int | None = None
    precision = components = 0
    ids: tuple[int, ...] = ()
    adobe: int | None = None
    orientation = 1
    seen_exif = False
    try:
        for marker, pos, length in jpeg_segments(data):
            payload = data[pos + 4 : pos + 2 + length]
            if is_frame_marker(marker):
                if len(payload) < 6:
                    return None
                marker_of_frame, precision, components = marker, payload[0], payload[5]
                ids = tuple(payload[6 + 3 * i] for i in range(components) if 6 + 3 * i < len(payload))
            elif marker == 0xE1 and payload[:6] == b"Exif\x00\x00" and not seen_exif:
                seen_exif = True  # like libjpeg-based readers, the first EXIF block counts
                orientation = _exif_orientation(payload)
            elif marker == 0xEE and payload[:5] == b"Adobe" and len(payload) >= 12:
                adobe = payload[11]
    except ImageError:
        return None
    if marker_of_frame is None:
        return None
    return JpegFrame(marker_of_frame, precision, components, ids, adobe, orientation)


def gpu_decodable(header: ImageHeader, data: bytes, frame: JpegFrame | None = None) -> bool:
    """True for the JPEGs nvImageCodec's GPU decoders turn into the same picture as OpenCV.

    ``frame`` is ``jpeg_frame(data)`` when the caller has it already.
    """
    if header.format != "jpeg":
        return False
    frame = frame if frame is not None else jpeg_frame(data)
    if frame is None or frame.marker not in _GPU_FRAMES or frame.precision != 8:
        return False
    if frame.components == 1:
        return True
    if frame.components != 3:
        return False  # CMYK / YCCK: OpenCV inverts Adobe CMYK, leave it to OpenCV
    # libjpeg reads a 3-component JPEG as RGB (no YCbCr transform) when Adobe says so or the component
    # ids spell "RGB"; nvJPEG would apply the YCbCr transform anyway.
    return frame.adobe_transform != 0 and frame.component_ids != (0x52, 0x47, 0x42)


def upright_size(header: ImageHeader, data: bytes, frame: JpegFrame | None = None) -> tuple[int, int]:
    """(width, height) of the decoded image once EXIF orientation is applied."""
    if frame is None and header.format == "jpeg":
        frame = jpeg_frame(data)
    if frame is not None and frame.orientation in TRANSPOSING_ORIENTATIONS:
        return header.height, header.width
    return header.width, header.height
