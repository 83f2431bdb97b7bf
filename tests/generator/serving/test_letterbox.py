"""Letterbox vs an independent re-implementation of the Ultralytics formula, and its inverse."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from generator.serving.letterbox import FILL_VALUE, Letterbox, boxes_to_source, letterbox, letterbox_into


def ultralytics_letterbox(image: np.ndarray, new_shape: tuple[int, int]) -> tuple[np.ndarray, float, int, int]:
    """The Ultralytics LetterBox (auto=False, scaleup=True, center=True) written from its formula."""
    shape = image.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    new_unpad = round(shape[1] * r), round(shape[0] * r)
    dw, dh = (new_shape[1] - new_unpad[0]) / 2, (new_shape[0] - new_unpad[1]) / 2
    if 0 in new_unpad:
        pytest.skip("Ultralytics itself fails here (cv2.resize to zero pixels); see the degenerate test")
    if (shape[1], shape[0]) != new_unpad:
        image = cv2.resize(image, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    out = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return out, r, left, top


SIZES = [
    (480, 640), (640, 480), (640, 640), (1080, 1920), (1920, 1080), (427, 640), (333, 500),
    (101, 37), (37, 101), (7, 9), (64, 64), (65, 63), (1, 3), (3, 1), (999, 1001), (2000, 3),
]
TARGETS = [(640, 640), (384, 640), (64, 64), (63, 65), (320, 192)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size", SIZES)
def test_matches_ultralytics_pixels_and_geometry(size: tuple[int, int], target: tuple[int, int]) -> None:
    rng = np.random.default_rng(size[0] * 7919 + size[1])
    image = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    expected, ratio, left, top = ultralytics_letterbox(image, target)
    out, params = letterbox(image, target)
    assert out.dtype == np.uint8 and out.shape == (*target, 3)
    np.testing.assert_array_equal(out, expected)
    assert (params.pad_x, params.pad_y) == (left, top)
    assert params.gain_x == pytest.approx(ratio) and params.gain_y == pytest.approx(ratio)
    assert (params.source_width, params.source_height) == (size[1], size[0])


@pytest.mark.parametrize("size", [(2000, 3), (3, 2000), (6000, 1), (1, 16384)])
def test_degenerate_thin_image_keeps_one_pixel(size: tuple[int, int]) -> None:
    # Rounding the resized side to zero used to make cv2.resize raise, failing a whole batch.
    image = np.full((*size, 3), 9, dtype=np.uint8)
    out, params = letterbox(image, (64, 64))
    assert (out == 9).any()
    box = np.array([[0.0, 0.0, size[1], size[0]]])
    back = boxes_to_source(_source_to_input(box, params).astype(np.float32), params.as_array())
    np.testing.assert_allclose(back, box, atol=max(size) / 64 + 1)


def test_odd_padding_puts_the_extra_pixel_bottom_right() -> None:
    # 100x61 into 64x64: ratio 0.64 -> 64x39, 25 rows of padding: 12 on top, 13 at the bottom.
    image = np.zeros((61, 100, 3), dtype=np.uint8)
    out, params = letterbox(image, (64, 64))
    assert params.pad_y == 12 and params.pad_x == 0
    rows_filled = np.nonzero((out != FILL_VALUE).any(axis=(1, 2)))[0]
    assert rows_filled[0] == 12 and rows_filled[-1] == 64 - 13 - 1


def test_exact_size_copies_without_resampling() -> None:
    image = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    out, params = letterbox(image, (64, 64))
    np.testing.assert_array_equal(out, image)
    assert params == Letterbox(0.0, 0.0, 1.0, 1.0, 64, 64)


def test_upscaling_a_small_image() -> None:
    image = np.full((10, 20, 3), 7, dtype=np.uint8)
    out, params = letterbox(image, (64, 64))
    assert params.gain_x == pytest.approx(3.2) and params.pad_y == 16
    assert (out[16:48] == 7).all() and (out[:16] == FILL_VALUE).all() and (out[48:] == FILL_VALUE).all()


def test_letterbox_into_overwrites_stale_content() -> None:
    out = np.zeros((64, 64, 3), dtype=np.uint8)
    letterbox_into(np.zeros((32, 64, 3), dtype=np.uint8), out)
    assert (out[:16] == FILL_VALUE).all() and (out[16:48] == 0).all()


def _source_to_input(boxes: np.ndarray, params: Letterbox) -> np.ndarray:
    gain = np.array([params.gain_x, params.gain_y] * 2)
    pad = np.array([params.pad_x, params.pad_y] * 2)
    return boxes * gain + pad


@pytest.mark.parametrize("size", SIZES[:12])
def test_boxes_to_source_inverts_the_mapping(size: tuple[int, int]) -> None:
    height, width = size
    rng = np.random.default_rng(width)
    _, params = letterbox(np.zeros((height, width, 3), dtype=np.uint8), (640, 640))
    xy1 = rng.uniform(0, [width, height], (50, 2))
    xy2 = xy1 + rng.uniform(0, [width, height], (50, 2))
    boxes = np.clip(np.concatenate([xy1, xy2], axis=1), 0, [width, height, width, height])
    back = boxes_to_source(_source_to_input(boxes, params).astype(np.float32), params.as_array())
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, boxes, atol=1.0)


def test_boxes_to_source_clips_to_the_image() -> None:
    _, params = letterbox(np.zeros((480, 640, 3), dtype=np.uint8), (640, 640))  # pad_y 80
    boxes = np.array([[-30.0, 10.0, 700.0, 630.0], [5.0, 0.0, 10.0, 40.0]], dtype=np.float32)
    back = boxes_to_source(boxes, params.as_array())
    assert back.min() >= 0
    assert (back[:, [0, 2]] <= 640).all() and (back[:, [1, 3]] <= 480).all()
    np.testing.assert_allclose(back[0], [0, 0, 640, 480])
    np.testing.assert_allclose(back[1], [5, 0, 10, 0])  # entirely inside the top padding


def test_boxes_to_source_broadcasts_per_image_params() -> None:
    _, a = letterbox(np.zeros((480, 640, 3), dtype=np.uint8), (64, 64))
    _, b = letterbox(np.zeros((640, 320, 3), dtype=np.uint8), (64, 64))
    boxes = np.tile(np.array([16.0, 16.0, 48.0, 48.0], dtype=np.float32), (2, 3, 1))
    params = np.stack([a.as_array(), b.as_array()])[:, None, :]
    back = boxes_to_source(boxes, params)
    np.testing.assert_allclose(back[0, 0], boxes_to_source(boxes[0, 0], a.as_array()))
    np.testing.assert_allclose(back[1, 2], boxes_to_source(boxes[1, 2], b.as_array()))
    assert not np.allclose(back[0], back[1])


@pytest.mark.parametrize("factor", [2, 4, 8])
def test_reduced_resolution_decode_maps_back_to_original_pixels(factor: int) -> None:
    full_h, full_w = 1200, 1600
    small = np.zeros((full_h // factor, full_w // factor, 3), dtype=np.uint8)
    out = np.empty((64, 64, 3), dtype=np.uint8)
    params = letterbox_into(small, out, source_size=(full_w, full_h))
    assert (params.source_width, params.source_height) == (full_w, full_h)
    _, full_params = letterbox(np.zeros((full_h, full_w, 3), dtype=np.uint8), (64, 64))
    assert params.gain_x == pytest.approx(full_params.gain_x)
    assert params.gain_y == pytest.approx(full_params.gain_y)
    boxes = np.array([[100.0, 200.0, 900.0, 1100.0], [0.0, 0.0, 1600.0, 1200.0]])
    back = boxes_to_source(_source_to_input(boxes, params).astype(np.float32), params.as_array())
    np.testing.assert_allclose(back, boxes, atol=1.0)


def test_reduced_decode_with_uneven_rounding_uses_separate_gains() -> None:
    # libjpeg rounds 1001/8 up to 126: the x and y gains then differ slightly, and both must be used.
    small = np.zeros((63, 126, 3), dtype=np.uint8)
    params = letterbox_into(small, np.empty((64, 128, 3), dtype=np.uint8), source_size=(1001, 500))
    assert params.gain_x == pytest.approx(128 / 126 * 126 / 1001)
    assert params.gain_y == pytest.approx(128 / 126 * 63 / 500)
    box = np.array([[1001.0, 500.0, 1001.0, 500.0]])
    back = boxes_to_source(_source_to_input(box, params).astype(np.float32), params.as_array())
    np.testing.assert_allclose(back, box, atol=0.5)
