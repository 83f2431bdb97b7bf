"""Which images the GPU decoder gets: decided from the JPEG frame and application segments."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from generator.serving.gpu.routing import gpu_decodable, jpeg_frame, upright_size
from generator.serving.images import DEFAULT_LIMITS, check_header, read_header
from tests.fixtures.image_corpus import adobe_app14, encode, patch_frame, scene, with_exif, with_segment, zoo

GPU_FORMATS = {"jpeg", "jpeg-progressive", "jpeg-gray", "jpeg-444", "jpeg-exif6", "jpeg-exif3"}


@pytest.mark.parametrize(("name", "data"), list(zoo().items()))
def test_zoo_routing(name: str, data: bytes) -> None:
    assert gpu_decodable(check_header(data, DEFAULT_LIMITS), data) == (name in GPU_FORMATS)


def jpeg() -> bytes:
    return encode(scene(48, 64), ".jpg")


def test_frame_of_a_baseline_and_a_progressive_jpeg() -> None:
    frame = jpeg_frame(jpeg())
    assert frame is not None and frame.marker == 0xC0 and frame.precision == 8
    assert frame.component_ids == (1, 2, 3) and frame.orientation == 1 and frame.adobe_transform is None
    progressive = jpeg_frame(encode(scene(48, 64), ".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]))
    assert progressive is not None and progressive.marker == 0xC2


@pytest.mark.parametrize(("marker", "precision", "ids", "gpu"), [
    (0xC1, None, None, True),  # extended sequential Huffman
    (0xC3, None, None, False),  # lossless
    (0xC9, None, None, False),  # arithmetic coding
    (None, 12, None, False),
    (None, None, (0x52, 0x47, 0x42), False),  # component ids "RGB": libjpeg skips the YCbCr transform
])
def test_frame_variants(marker: int | None, precision: int | None, ids: tuple[int, ...] | None, gpu: bool) -> None:
    data = patch_frame(jpeg(), marker, precision, ids)
    assert gpu_decodable(read_header(data), data) is gpu


@pytest.mark.parametrize(("transform", "gpu"), [(0, False), (1, True), (2, True)])
def test_adobe_transform(transform: int, gpu: bool) -> None:
    data = with_segment(jpeg(), adobe_app14(transform))
    frame = jpeg_frame(data)
    assert frame is not None and frame.adobe_transform == transform
    # A 3-component image with transform 2 (YCCK) cannot exist; only "none" changes the colours.
    assert gpu_decodable(read_header(data), data) is gpu


def test_four_components_go_to_the_cpu() -> None:
    data = bytearray(jpeg())
    at = bytes(data).index(b"\xff\xc0")
    data[at + 9] = 4  # component count; only the routing reads this far
    assert not gpu_decodable(read_header(bytes(data)), bytes(data))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_and_upright_size(orientation: int) -> None:
    data = with_exif(jpeg(), orientation)
    frame = jpeg_frame(data)
    assert frame is not None and frame.orientation == orientation
    expected = (48, 64) if orientation >= 5 else (64, 48)
    assert upright_size(read_header(data), data) == expected
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    assert (image.shape[1], image.shape[0]) == expected  # what OpenCV does


def test_malformed_exif_counts_as_upright() -> None:
    segment = b"\xff\xe1\x00\x0eExif\x00\x00MM\x00*\xff\xff"  # IFD offset past the end
    data = with_segment(jpeg(), segment)
    frame = jpeg_frame(data)
    assert frame is not None and frame.orientation == 1


@pytest.mark.parametrize("data", [b"\xff\xd8\xff", b"\xff\xd8\xff\xe0\x00\x02", b"\xff\xd8" + b"\x00" * 10,
                                  b"\xff\xd8\xff\xda\x00\x02\xff\xd9"])
def test_unparsable_frames_are_none(data: bytes) -> None:
    assert jpeg_frame(data) is None
