"""prepare_batch: good images fill the batch in order, bad ones are reported by position."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from generator.serving.batch import prepare_batch, to_float_nchw
from generator.serving.images import ImageLimits, decode_image
from generator.serving.letterbox import letterbox

TARGET = (64, 64)


def encode(image: np.ndarray, ext: str = ".png") -> bytes:
    ok, buf = cv2.imencode(ext, image)
    assert ok
    return buf.tobytes()


def picture(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_good_images_keep_their_order_and_bad_ones_are_reported_by_position() -> None:
    images = [picture(48, 80, 0), picture(100, 30, 1), picture(64, 64, 2)]
    encoded = [b"garbage!", encode(images[0]), b"", encode(images[1]), encode(images[2])[:50],
               encode(images[2]), encode(picture(1, 6000, 3))]
    batch = prepare_batch(encoded, TARGET)
    assert batch.index == [1, 3, 5, 6]
    assert sorted(batch.errors) == [0, 2, 4]
    assert "unrecognised image format" in batch.errors[0]
    assert "empty image" in batch.errors[2]
    assert "PNG" in batch.errors[4]
    assert batch.images.shape == (4, *TARGET, 3) and batch.images.dtype == np.uint8
    assert batch.letterbox.shape == (4, 6) and batch.letterbox.dtype == np.float32
    for slot, image in enumerate(images):
        expected, params = letterbox(image, TARGET)
        np.testing.assert_array_equal(batch.images[slot], expected)
        np.testing.assert_array_equal(batch.letterbox[slot], params.as_array())


def test_all_bad_gives_an_empty_batch() -> None:
    batch = prepare_batch([b"", b"x"], TARGET)
    assert batch.images.shape == (0, *TARGET, 3) and batch.letterbox.shape == (0, 6)
    assert batch.index == [] and set(batch.errors) == {0, 1}


def test_limits_apply_per_image() -> None:
    small, large = encode(picture(10, 10, 0)), encode(picture(200, 200, 1))
    batch = prepare_batch([large, small], TARGET, ImageLimits(max_side=100))
    assert batch.index == [1] and "200x200" in batch.errors[0]


@pytest.mark.parametrize("reduced", [True, False])
def test_reduced_decode_keeps_letterbox_params_in_source_pixels(reduced: bool) -> None:
    image = cv2.GaussianBlur(picture(960, 1280, 4), (31, 31), 0)
    data = encode(image, ".jpg")
    batch = prepare_batch([data], TARGET, reduced_decode=reduced)
    _, full = letterbox(decode_image(data)[0], TARGET)
    np.testing.assert_allclose(batch.letterbox[0], full.as_array(), rtol=1e-6)
    assert np.abs(batch.images[0].astype(int) - letterbox(image, TARGET)[0]).mean() < 6


def test_to_float_nchw_is_rgb_scaled() -> None:
    bgr = picture(4, 5, 0)[None]
    out = to_float_nchw(bgr)
    assert out.shape == (1, 3, 4, 5) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0], bgr[0, ..., 2] / 255.0, rtol=1e-6)
    np.testing.assert_allclose(out[0, 2], bgr[0, ..., 0] / 255.0, rtol=1e-6)
    assert to_float_nchw(bgr, np.float16).dtype == np.float16


def test_every_rejection_carries_the_reason_telemetry_counts_it_under() -> None:
    """One image per reason of ensemble_rejected_images_total, through the same checks the server runs."""
    good = encode(picture(40, 40, 5), ".jpg")
    progressive = cv2.imencode(".jpg", picture(64, 64, 6), [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    encoded = {
        "empty": b"",
        "format": b"GIF89a" + bytes(64),
        "truncated": good[: len(good) // 2],
        "too_large": encode(picture(10, 300, 7)),
        "decode_budget": progressive,
    }
    batch = prepare_batch([good, *encoded.values()], TARGET, ImageLimits(max_side=200, max_jpeg_scans=2))
    assert batch.index == [0]
    assert batch.reasons == dict(enumerate(encoded, start=1))
    assert set(batch.reasons) == set(batch.errors)
