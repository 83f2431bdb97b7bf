"""Header parsing and safe decoding: real encodings from cv2, hostile bytes built by hand."""

from __future__ import annotations

import math
import os
import resource
import struct
import subprocess
import sys
import time
import zlib

import cv2
import numpy as np
import pytest

from generator.serving.contract import OPENCV_PIXEL_LIMIT_ENV
from generator.serving.images import (
    DecodeBudget,
    ImageError,
    ImageHeader,
    ImageLimits,
    check_decode_budget,
    check_header,
    decode_cost_megapixels,
    decode_image,
    measure_decode_speed,
    read_header,
    reduction_factor,
)
from tests.generator.serving.helpers import encode, gradient, progressive, scan_offsets, with_repeated_scan

LIMITS = ImageLimits()


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def hostile_png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\x00" * 4, 9))
            + png_chunk(b"IEND", b""))


def set_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """Rewrite the dimensions in the first SOF segment of a real JPEG."""
    pos = 2
    while True:
        marker = data[pos + 1]
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if 0xC0 <= marker <= 0xC2:
            return data[: pos + 5] + struct.pack(">HH", height, width) + data[pos + 9 :]
        pos += 2 + length


def exif_app1(orientation: int) -> bytes:
    """APP1 segment with a big-endian TIFF IFD0 holding only the Orientation tag (0x0112, SHORT)."""
    ifd = struct.pack(">H", 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">I", 0)
    payload = b"Exif\x00\x00" + b"MM\x00\x2a" + struct.pack(">I", 8) + ifd
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def with_exif(jpeg: bytes, orientation: int) -> bytes:
    return jpeg[:2] + exif_app1(orientation) + jpeg[2:]


# --- header parsing of real encodings -----------------------------------------------------------------

ENCODINGS = [
    ("jpeg", ".jpg", []),
    ("png", ".png", []),
    ("bmp", ".bmp", []),
    ("webp", ".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]),  # lossy: VP8
    ("webp", ".webp", [cv2.IMWRITE_WEBP_QUALITY, 101]),  # lossless: VP8L
    ("tiff", ".tiff", []),
]


@pytest.mark.parametrize("size", [(1, 1), (37, 101), (480, 640), (641, 479)])
@pytest.mark.parametrize(("fmt", "ext", "params"), ENCODINGS)
def test_header_dimensions_match_the_encoded_image(fmt: str, ext: str, params: list[int],
                                                   size: tuple[int, int]) -> None:
    data = encode(gradient(*size), ext, params)
    header = check_header(data, LIMITS)
    assert header == ImageHeader(fmt, size[1], size[0])
    image, source = decode_image(data)
    assert image.shape == (*size, 3) and image.dtype == np.uint8
    assert source == (size[1], size[0])


def test_webp_vp8x_header() -> None:
    # Extended WebP (alpha/animation/metadata): canvas size minus one in 24-bit little-endian fields.
    payload = b"\x10\x00\x00\x00" + (1999).to_bytes(3, "little") + (2999).to_bytes(3, "little")
    body = b"WEBP" + b"VP8X" + struct.pack("<I", len(payload)) + payload
    data = b"RIFF" + struct.pack("<I", len(body)) + body
    assert read_header(data) == ImageHeader("webp", 2000, 3000)


@pytest.mark.parametrize(("order", "kind"), [(">", 3), (">", 4), ("<", 3), ("<", 4)])
def test_tiff_header_both_byte_orders_short_and_long(order: str, kind: int) -> None:
    value = struct.pack(order + ("HH" if kind == 3 else "I"), *((1234, 0) if kind == 3 else (1234,)))
    height = struct.pack(order + ("HH" if kind == 3 else "I"), *((567, 0) if kind == 3 else (567,)))
    entries = [struct.pack(order + "HHI", 0x0100, kind, 1) + value, struct.pack(order + "HHI", 0x0101, kind, 1) + height]
    magic = b"II*\x00" if order == "<" else b"MM\x00*"
    data = magic + struct.pack(order + "I", 8) + struct.pack(order + "H", 2) + b"".join(entries) + b"\x00" * 4
    assert read_header(data) == ImageHeader("tiff", 1234, 567)


# --- hostile input -------------------------------------------------------------------------------------


def assert_rejected_fast(data: bytes, message: str, limits: ImageLimits = LIMITS) -> None:
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(ImageError, match=message):
        decode_image(data, limits, target=(640, 640))
    assert time.perf_counter() - start < 0.2  # parsing takes microseconds; the attacks cost seconds
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown_kib < 50_000


def test_tiny_png_declaring_50000_squared_is_rejected_from_its_header() -> None:
    data = hostile_png(50000, 50000)
    assert len(data) < 80
    with pytest.raises(ImageError, match="50000x50000"):
        check_header(data, LIMITS)
    assert_rejected_fast(data, r"png image declares 50000x50000 pixels, above the limit")


def test_jpeg_whose_frame_header_declares_30000_squared() -> None:
    data = set_jpeg_size(encode(gradient(16, 16), ".jpg"), 30000, 30000)
    assert read_header(data) == ImageHeader("jpeg", 30000, 30000)
    assert_rejected_fast(data, r"jpeg image declares 30000x30000 pixels")


def test_pixel_limit_is_separate_from_the_side_limit() -> None:
    data = hostile_png(8000, 8000)  # every side within 16384, but 64 megapixels
    assert_rejected_fast(data, "8000x8000")
    tight = ImageLimits(max_pixels=1000, max_side=100)
    with pytest.raises(ImageError, match="101x10"):
        check_header(encode(gradient(10, 101), ".png"), tight)
    with pytest.raises(ImageError, match="40x30"):
        check_header(encode(gradient(30, 40), ".png"), tight)
    assert check_header(encode(gradient(10, 100), ".png"), tight).width == 100


def test_zero_dimension_header_is_rejected() -> None:
    with pytest.raises(ImageError, match="empty image"):
        check_header(hostile_png(0, 10), LIMITS)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty image"),
        (b"\x00" * 64, "unsupported or unrecognised image format"),
        (b"not an image at all, just some text", "unsupported or unrecognised"),
        (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,"
         b"\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;", "unsupported or unrecognised"),
        (b"\xff\xd8\xff", "truncated JPEG"),
        (b"\x89PNG\r\n\x1a\n", "corrupt PNG"),
        (b"RIFF\x00\x00\x00\x00WEBP", "truncated WebP"),
        (b"BM\x00", "truncated BMP"),
        (b"II*\x00\xff\xff\x00\x00", "truncated TIFF"),
    ],
)
def test_garbage_is_rejected_with_a_clear_message(data: bytes, message: str) -> None:
    assert_rejected_fast(data, message)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_jpeg_is_rejected(fraction: float) -> None:
    data = encode(gradient(200, 300), ".jpg")
    assert_rejected_fast(data[: int(len(data) * fraction)], "truncated JPEG")


@pytest.mark.parametrize("fraction", [0.5, 0.9])
def test_truncated_png_is_rejected(fraction: float) -> None:
    data = encode(np.random.default_rng(0).integers(0, 256, (100, 100, 3), dtype=np.uint8), ".png")
    assert_rejected_fast(data[: int(len(data) * fraction)], "truncated PNG")


@pytest.mark.parametrize("declared", [0x7FFFFFFF, 0x40000000, 0xFFFFFFF0, 8000])
def test_png_chunk_longer_than_the_file_is_rejected_fast(declared: int) -> None:
    # A 7 KB PNG whose IDAT length field says 2 GB made cv2.imdecode allocate 2 GB and take a second.
    data = encode(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8), ".png")
    assert data[37:41] == b"IDAT"
    hostile = data[:33] + struct.pack(">I", declared) + data[37:]
    assert_rejected_fast(hostile, "truncated PNG: a chunk is longer than the remaining data")


def test_png_chunk_spam_is_bounded() -> None:
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
    data = b"\x89PNG\r\n\x1a\n" + ihdr + png_chunk(b"tEXt", b"") * 100_001 + png_chunk(b"IEND", b"")
    start = time.perf_counter()
    with pytest.raises(ImageError, match="more than 100000 chunks"):
        check_header(data, LIMITS)
    assert time.perf_counter() - start < 1.0


def test_png_with_data_after_iend_is_accepted() -> None:
    data = encode(gradient(20, 30), ".png") + b"trailing bytes some tools append"
    assert decode_image(data)[0].shape == (20, 30, 3)


@pytest.mark.parametrize(("ext", "params"), [(".jpg", []), (".png", []), (".bmp", []),
                                             (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]), (".tiff", [])])
def test_mutated_images_only_ever_raise_image_error_and_stay_fast(ext: str, params: list[int]) -> None:
    rng = np.random.default_rng(len(ext))
    data = encode(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8), ext, params)
    worst = 0.0
    for _ in range(150):
        mutated = bytearray(data)
        kind = rng.integers(0, 3)
        if kind == 0:
            mutated = mutated[: rng.integers(1, len(data))]
        elif kind == 1:
            for _ in range(rng.integers(1, 8)):
                mutated[rng.integers(0, len(data))] = rng.integers(0, 256)
        else:  # overwrite 4 bytes among the headers: lengths, sizes, offsets
            at = rng.integers(0, 64)
            mutated[at : at + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        start = time.perf_counter()
        try:
            image, _ = decode_image(bytes(mutated), target=(64, 64))
        except ImageError:
            pass
        else:
            assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
        worst = max(worst, time.perf_counter() - start)
    assert worst < 0.5


@pytest.mark.parametrize("ext", [".bmp", ".webp"])
def test_truncated_bmp_and_webp_are_rejected(ext: str) -> None:
    data = encode(np.random.default_rng(0).integers(0, 256, (100, 100, 3), dtype=np.uint8), ext)
    assert_rejected_fast(data[: len(data) // 2], "truncated")


def test_jpeg_with_a_cut_scan_but_an_end_marker_never_raises_anything_else() -> None:
    data = encode(gradient(64, 64), ".jpg")
    broken = data[:-200] + b"\xff\xd9"  # header intact, scan cut short, end marker present
    try:
        image, source = decode_image(broken)
    except ImageError as exc:
        assert "jpeg" in str(exc)
    else:  # libjpeg fills a short scan with grey; the shape must still be right
        assert image.shape == (64, 64, 3) and source == (64, 64)


def test_over_max_bytes_is_rejected_before_parsing() -> None:
    data = encode(gradient(64, 64), ".png")
    limits = ImageLimits(max_bytes=len(data) - 1)
    assert_rejected_fast(data, rf"encoded image is {len(data)} bytes, above the limit of {len(data) - 1}", limits)
    assert decode_image(data, ImageLimits(max_bytes=len(data)))[0].shape == (64, 64, 3)


# --- channel and depth normalisation -------------------------------------------------------------------


def test_grayscale_decodes_to_three_equal_channels() -> None:
    gray = gradient(20, 30)[..., 0]
    for ext in (".png", ".jpg"):
        image, _ = decode_image(encode(gray, ext))
        assert image.shape == (20, 30, 3) and image.dtype == np.uint8
        assert (image[..., 0] == image[..., 1]).all() and (image[..., 1] == image[..., 2]).all()
    image, _ = decode_image(encode(gray, ".png"))
    np.testing.assert_array_equal(image[..., 0], gray)


def test_rgba_png_drops_alpha() -> None:
    bgra = np.dstack([gradient(20, 30), np.full((20, 30), 7, dtype=np.uint8)])
    image, _ = decode_image(encode(bgra, ".png"))
    np.testing.assert_array_equal(image, bgra[..., :3])


def test_16_bit_png_decodes_to_8_bit() -> None:
    deep = (gradient(20, 30).astype(np.uint16) * 257)  # 0..65535, 8-bit value v becomes v * 257
    image, _ = decode_image(encode(deep, ".png"))
    assert image.dtype == np.uint8 and image.shape == (20, 30, 3)
    np.testing.assert_array_equal(image, gradient(20, 30))


# --- EXIF orientation ----------------------------------------------------------------------------------


def test_exif_orientation_6_rotates_clockwise_and_reports_the_rotated_size() -> None:
    original = gradient(40, 80)
    data = with_exif(encode(original, ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 98]), 6)
    assert read_header(data) == ImageHeader("jpeg", 80, 40)  # the header keeps the stored orientation
    image, source = decode_image(data)
    assert image.shape == (80, 40, 3) and source == (40, 80)
    expected = cv2.rotate(original, cv2.ROTATE_90_CLOCKWISE)
    assert np.abs(image.astype(int) - expected).mean() < 3
    assert np.abs(image.astype(int) - cv2.rotate(original, cv2.ROTATE_90_COUNTERCLOCKWISE)).mean() > 30


def test_exif_orientation_1_is_unchanged() -> None:
    data = with_exif(encode(gradient(40, 80), ".jpg"), 1)
    image, source = decode_image(data)
    assert image.shape == (40, 80, 3) and source == (80, 40)


# --- reduced-resolution decode -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "target", "factor"),
    [
        (640, 640, (640, 640), 1),
        (1279, 1279, (640, 640), 2),  # ceil(1279 / 2) = 640 covers the 640x640 letterbox
        (1277, 1277, (640, 640), 1),
        (1280, 1280, (640, 640), 2),
        (1280, 720, (640, 640), 2),  # letterboxed to 640x360: exactly the 1/2 decode
        (1920, 1080, (640, 640), 2),  # 1/4 would give 480x270, below the 640x360 letterbox
        (2560, 1920, (640, 640), 4),
        (2560, 2560, (640, 640), 4),
        (5120, 5120, (640, 640), 8),
        (16000, 16000, (640, 640), 8),  # libjpeg's smallest scale
        (1280, 768, (384, 640), 2),
        (100, 100, (64, 64), 1),
        (4000, 3000, (64, 64), 8),
    ],
)
def test_reduction_factor_never_goes_below_the_target(width: int, height: int, target: tuple[int, int],
                                                      factor: int) -> None:
    assert reduction_factor(ImageHeader("jpeg", width, height), target) == factor
    ratio = min(target[0] / height, target[1] / width)
    needed = (round(width * ratio), round(height * ratio))  # what the letterbox resizes to
    # The reduced image still covers the letterboxed image (no upsampling)...
    assert math.ceil(width / factor) >= needed[0] and math.ceil(height / factor) >= needed[1]
    if factor < 8:  # ...and is the smallest one that does
        assert math.ceil(width / (factor * 2)) < needed[0] or math.ceil(height / (factor * 2)) < needed[1]


@pytest.mark.parametrize("fmt", ["png", "bmp", "webp", "tiff"])
def test_reduction_only_applies_to_jpeg(fmt: str) -> None:
    assert reduction_factor(ImageHeader(fmt, 8000, 8000), (64, 64)) == 1


def test_reduced_decode_returns_the_full_source_size() -> None:
    data = encode(gradient(960, 1280), ".jpg")
    image, source = decode_image(data, target=(64, 64))
    assert image.shape == (120, 160, 3)  # 1/8
    assert source == (1280, 960)
    full, full_source = decode_image(data)
    assert full.shape == (960, 1280, 3) and full_source == (1280, 960)
    # The reduced decode is the same picture at a lower resolution.
    small = cv2.resize(full, (160, 120), interpolation=cv2.INTER_AREA)
    assert np.abs(small.astype(int) - image).mean() < 3


def test_reduced_decode_of_an_exif_rotated_jpeg() -> None:
    data = with_exif(encode(gradient(960, 1280), ".jpg"), 6)
    image, source = decode_image(data, target=(64, 64))
    assert image.shape == (160, 120, 3)
    assert source == (960, 1280)


# --- bounded work per image: progressive scans and the decode budget -----------------------------------


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def test_progressive_jpeg_header_counts_its_scans() -> None:
    data = progressive()
    header = check_header(data, LIMITS)
    assert header.progressive and header.scans == len(scan_offsets(data)) == 10  # libjpeg's default script
    assert (header.width, header.height) == (128, 96)
    assert read_header(encode(gradient(96, 128), ".jpg")).scans == 1
    assert decode_image(data)[0].shape == (96, 128, 3)


def test_thousands_of_repeated_scans_are_rejected_before_decoding() -> None:
    bomb = with_repeated_scan(progressive(480, 640), 5000)
    # What the check saves: OpenCV decodes every copy (hundreds of milliseconds at this small size,
    # seconds for a big image or for AC scans).
    start = time.perf_counter()
    assert cv2.imdecode(np.frombuffer(bomb, np.uint8), cv2.IMREAD_REDUCED_COLOR_8) is not None
    assert time.perf_counter() - start > 0.05
    assert_rejected_fast(bomb, r"jpeg image has more than 64 scans, above the limit of 64")


def test_scan_limit_is_inclusive() -> None:
    data = progressive()
    assert check_header(data, ImageLimits(max_jpeg_scans=10)).scans == 10
    with pytest.raises(ImageError, match="more than 9 scans"):
        check_header(data, ImageLimits(max_jpeg_scans=9))


def test_segments_between_scans_are_skipped_by_their_length() -> None:
    # A comment after the first scan holding an end marker and a start-of-scan: libjpeg skips it by its
    # length, so must the count (a fake end marker would otherwise hide the scans after it).
    data = progressive()
    second = scan_offsets(data)[1]
    hidden = data[:second] + segment(0xFE, b"\xff\xd9\xff\xda\x00\x08") + data[second:]
    assert read_header(hidden).scans == 10
    assert decode_image(hidden)[0].shape == (96, 128, 3)
    bomb = with_repeated_scan(data, 100)
    second = scan_offsets(bomb)[1]
    disguised = bomb[:second] + segment(0xFE, b"\xff\xd9") + bomb[second:]
    with pytest.raises(ImageError, match="more than 64 scans"):
        check_header(disguised, LIMITS)


def test_extra_scans_after_one_interleaved_scan_are_not_walked() -> None:
    # libjpeg stops at a second scan of a single-scan baseline JPEG, so repeats cost nothing to decode and
    # the header check keeps its cheap end-marker search.
    data = encode(gradient(96, 128), ".jpg")
    first, end = scan_offsets(data)[0], data.rindex(b"\xff\xd9")
    repeated = data[:end] + data[first:end] * 500 + b"\xff\xd9"
    assert check_header(repeated, LIMITS) == ImageHeader("jpeg", 128, 96)
    assert decode_image(repeated)[0].shape == (96, 128, 3)


def test_sequential_jpeg_with_one_component_per_scan_is_walked() -> None:
    # A non-interleaved baseline JPEG (first scan: 1 of 3 components) has a scan per component, and libjpeg
    # reads every further one: those are counted like progressive scans.
    data = encode(gradient(96, 128), ".jpg")
    first, end = scan_offsets(data)[0], data.rindex(b"\xff\xd9")
    one_component = data[:first + 4] + b"\x01" + data[first + 5 : end]
    assert read_header(one_component + b"\xff\xd9").scans == 1
    with pytest.raises(ImageError, match="more than 64 scans"):
        read_header(one_component + data[first:end] * 100 + b"\xff\xd9")


def test_marker_spam_between_scans_is_bounded() -> None:
    data = progressive()
    second = scan_offsets(data)[1]
    spam = data[:second] + segment(0xFE, b"x") * 100_000 + data[second:]
    start = time.perf_counter()
    with pytest.raises(ImageError, match="corrupt JPEG: too many markers between scans"):
        check_header(spam, LIMITS)
    assert time.perf_counter() - start < 0.2


def test_truncated_progressive_jpeg_has_no_end_marker() -> None:
    data = progressive()
    assert_rejected_fast(data[: scan_offsets(data)[5] + 100], "truncated JPEG: no end-of-image marker")


BUDGET = DecodeBudget(max_ms=100.0, ms_per_megapixel=10.0)


@pytest.mark.parametrize(("header", "factor", "megapixels"), [
    (ImageHeader("jpeg", 4000, 3000), 1, 12.0),
    (ImageHeader("jpeg", 4000, 3000), 8, 12.0 * 0.35),  # reduced: entropy decoding still costs
    (ImageHeader("jpeg", 4000, 3000, scans=10, progressive=True), 1, 12.0 * 2.5),
    (ImageHeader("png", 4000, 3000), 1, 48.0),
    (ImageHeader("bmp", 4000, 3000), 1, 2.4),
])
def test_decode_cost_scales_with_pixels_format_reduction_and_scans(header: ImageHeader, factor: int,
                                                                   megapixels: float) -> None:
    assert decode_cost_megapixels(header, factor) == pytest.approx(megapixels)


def test_image_over_the_decode_budget_is_rejected_from_its_header() -> None:
    data = hostile_png(4000, 3000)  # 12 MP, inside every size limit; 68 bytes
    message = (r"png image of 4000x3000 pixels would take about 480 ms to decode, above the budget of "
               r"100 ms per image; send it downscaled")
    assert_rejected_fast(data, message, ImageLimits(decode_budget=BUDGET))


def test_reduced_decode_is_what_the_budget_counts() -> None:
    data = encode(gradient(1500, 2000), ".jpg")  # 3 MP: 30 ms at full size, 10.5 ms at 1/8
    tight = ImageLimits(decode_budget=DecodeBudget(max_ms=20.0, ms_per_megapixel=10.0))
    with pytest.raises(ImageError, match="about 30 ms to decode"):
        decode_image(data, tight)
    image, source = decode_image(data, tight, target=(64, 64))
    assert image.shape == (188, 250, 3) and source == (2000, 1500)
    check_decode_budget(read_header(data), 8, tight.decode_budget)  # type: ignore[arg-type]


def test_decode_speed_is_measured_on_a_camera_like_frame() -> None:
    # libjpeg-turbo decodes tens to hundreds of megapixels per second on any CPU of the last decade.
    assert 0.5 < measure_decode_speed(runs=3) < 200


def test_without_a_budget_only_the_size_limits_apply() -> None:
    assert LIMITS.decode_budget is None
    assert decode_image(encode(gradient(1500, 2000), ".png"))[0].shape == (1500, 2000, 3)


def test_opencv_pixel_limit_fails_only_that_image() -> None:
    # OpenCV reads OPENCV_IO_MAX_IMAGE_PIXELS once, at import: a fresh interpreter sees this one.
    script = (
        "import cv2, numpy as np\n"
        "from generator.serving.images import ImageError, decode_image\n"
        "big = cv2.imencode('.png', np.zeros((40, 40, 3), np.uint8))[1].tobytes()\n"
        "small = cv2.imencode('.png', np.zeros((20, 20, 3), np.uint8))[1].tobytes()\n"
        "print(decode_image(small)[0].shape)\n"
        "try:\n    decode_image(big)\nexcept ImageError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, OPENCV_PIXEL_LIMIT_ENV: "1000"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "(20, 20, 3)",
        "could not decode the png image: the decoder refused it (check failed: pixels <= CV_IO_MAX_IMAGE_PIXELS)",
    ]


def test_each_error_class_is_one_rejection_reason_of_the_contract() -> None:
    from generator.serving import images
    from generator.serving.contract import REJECTION_REASONS

    classes = [c for c in vars(images).values() if isinstance(c, type) and issubclass(c, ImageError)]
    assert sorted(c.reason for c in classes) == sorted(REJECTION_REASONS)
    with pytest.raises(images.ImageTooLargeError):
        check_header(hostile_png(50000, 50000), LIMITS)
    with pytest.raises(images.TruncatedImageError):
        check_header(hostile_png(10, 10)[:-12], LIMITS)
