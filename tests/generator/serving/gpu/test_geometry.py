"""The GPU letterbox's arithmetic, modelled in NumPy, against cv2.resize and the CPU letterbox, bit for bit."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest

from generator.serving.batch import prepare_batch
from generator.serving.gpu.geometry import (
    COEF_SCALE,
    axis_taps,
    letterbox_reference,
    plan_image,
    reduce_blocks,
    reduced_size,
    resize_reference,
    simd_end,
)
from generator.serving.images import ImageHeader, decode_image, reduction_factor
from generator.serving.letterbox import letterbox
from tests.fixtures.image_corpus import encode, scene, with_exif

SIZES = [
    (480, 640), (640, 480), (640, 640), (1080, 1920), (720, 1280), (427, 640), (333, 500),
    (101, 37), (37, 101), (7, 9), (64, 64), (65, 63), (1, 3), (3, 1), (999, 1001), (2000, 3), (1, 1),
]
TARGETS = [(640, 640), (384, 640), (64, 64), (63, 65), (320, 192)]


def random_image(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(("size", "out"), list(itertools.product(
    [(480, 640), (720, 1280), (101, 37), (7, 9), (1, 3), (2000, 3), (2, 2)],
    [(640, 640), (640, 360), (63, 65), (1, 1), (5, 3), (641, 361), (3, 2000), (2, 1), (1280, 720)],
)))
def test_resize_reference_is_cv2_inter_linear(size: tuple[int, int], out: tuple[int, int]) -> None:
    image = random_image(*size, seed=size[0] * 31 + out[0])
    np.testing.assert_array_equal(resize_reference(image, out), cv2.resize(image, out, interpolation=cv2.INTER_LINEAR))


def test_resize_reference_on_random_sizes() -> None:
    rng = np.random.default_rng(7)
    for i in range(200):
        height, width = (int(v) for v in rng.integers(1, 700, 2))
        if i % 5 == 0:
            out = (max(1, width // 2), max(1, height // 2))
        else:
            out_width, out_height = (int(v) for v in rng.integers(1, 700, 2))
            out = (out_width, out_height)
        image = random_image(height, width, i)
        expected = cv2.resize(image, out, interpolation=cv2.INTER_LINEAR)
        np.testing.assert_array_equal(resize_reference(image, out), expected, err_msg=f"{width}x{height} -> {out}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size", SIZES)
def test_letterbox_reference_is_the_cpu_letterbox(size: tuple[int, int], target: tuple[int, int]) -> None:
    image = random_image(*size, seed=size[0] * 7919 + size[1])
    expected, params = letterbox(image, target)
    plan = plan_image(size[1], size[0], target)
    np.testing.assert_array_equal(letterbox_reference(image, plan, target), expected)
    np.testing.assert_array_equal(plan.params, params.as_array())


def test_axis_taps_weights_and_clamping() -> None:
    taps = axis_taps(1280, 640, True)
    assert (taps.weight0.astype(int) + taps.weight1 == COEF_SCALE).all()
    assert (taps.first == np.arange(0, 1280, 2)).all() and (taps.weight0 == 1024).all()
    up = axis_taps(4, 9, True)  # upscaling: the edges clamp with weight 0 on the far sample
    assert up.first[0] == 0 and up.weight1[0] == 0 and up.first[-1] == 3 and up.weight1[-1] == 0
    rows = axis_taps(4, 9, False)  # vertically OpenCV keeps the weights and clamps the row index only
    assert rows.first[0] == 0 and rows.second[0] == 0 and rows.weight1[0] > 0
    assert not taps.first.flags.writeable


def test_simd_end() -> None:
    assert simd_end(1920) == 1920
    assert simd_end(1281, (16, 8)) == 1280
    assert simd_end(189, (16, 8)) == 184
    assert simd_end(5, (16, 8)) == 0


def test_reduce_blocks_averages_with_repeated_edges() -> None:
    image = random_image(5, 7, 3)
    reduced = reduce_blocks(image, 2)
    assert reduced.shape == (3, 4, 3) == (*reduced_size(7, 5, 2)[::-1], 3)
    padded = np.pad(image.astype(int), ((0, 1), (0, 1), (0, 0)), mode="edge")
    for y, x in itertools.product(range(3), range(4)):
        block = padded[2 * y : 2 * y + 2, 2 * x : 2 * x + 2]
        np.testing.assert_array_equal(reduced[y, x], (block.sum(axis=(0, 1)) + 2) // 4)
    assert reduce_blocks(image, 1) is image


@pytest.mark.parametrize(("width", "height", "target", "factor"), [
    (1280, 720, (640, 640), 2), (1920, 1080, (640, 640), 2), (1281, 721, (640, 640), 2),
    (1280, 960, (64, 64), 8), (960, 1280, (96, 64), 8), (2560, 1920, (640, 640), 4),
])
def test_reduced_plan_has_the_cpu_reduced_decode_parameters(width: int, height: int, target: tuple[int, int],
                                                            factor: int) -> None:
    data = encode(scene(height, width), ".jpg")
    reduced, source = decode_image(data, target=target)
    assert reduced.shape[:2] == reduced_size(width, height, factor)[::-1] and source == (width, height)
    plan = plan_image(width, height, target, factor)
    assert (plan.width, plan.height) == (reduced.shape[1], reduced.shape[0])
    cpu = prepare_batch([data], target, reduced_decode=True)
    np.testing.assert_array_equal(plan.params, cpu.letterbox[0])


@pytest.mark.parametrize(("width", "height", "target"), [
    (1280, 720, (640, 640)), (1920, 1080, (640, 640)), (2560, 1440, (640, 640)), (1280, 960, (64, 64)),
])
def test_block_average_stands_in_for_the_reduced_decode(width: int, height: int, target: tuple[int, int]) -> None:
    """Full decode + block average + resize (the GPU path) against libjpeg's reduced decode + resize (the CPU path).

    Not equal (libjpeg scales in the DCT domain), but close: these bounds are what the model gives on
    synthetic scenes with OpenCV's decoder standing in for nvJPEG.
    """
    data = encode(scene(height, width, seed=width), ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 90])
    full, _ = decode_image(data)
    cpu = prepare_batch([data], target, reduced_decode=True)
    factor = reduction_factor(ImageHeader("jpeg", width, height), target)
    gpu = letterbox_reference(full, plan_image(width, height, target, factor), target)
    diff = np.abs(gpu.astype(int) - cpu.images[0])
    assert diff.mean() < 1.5 and np.percentile(diff, 99) <= 12


def test_exif_rotated_plan_uses_the_upright_size() -> None:
    data = with_exif(encode(scene(720, 1280), ".jpg"), 6)
    cpu = prepare_batch([data], (640, 640), reduced_decode=True)
    np.testing.assert_array_equal(plan_image(720, 1280, (640, 640), 2).params, cpu.letterbox[0])


def test_plan_rejects_other_factors() -> None:
    with pytest.raises(ValueError, match="1, 2, 4 or 8"):
        plan_image(100, 100, (64, 64), 3)
