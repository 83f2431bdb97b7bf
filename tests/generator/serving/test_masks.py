"""Masks from prototypes (generator.serving.masks): COCO's compressed RLE both ways, and masks in source pixels.

The masks against Ultralytics' own predict are tests/integration/test_task_heads.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from clients.rle import decode_counts, decode_mask
from generator.serving.masks import box_windows, encode_counts, run_lengths, source_masks, window_run_lengths


def test_the_compressed_string_follows_cocos_format() -> None:
    # 3 and 2 fit one 5-bit group; 40 needs two (8 with the continuation bit, then 1); the fourth count is
    # written as its difference from the second (1 - 1 = 0) and the fifth as -1 (sign-extended group 31).
    assert encode_counts(np.array([3, 2, 40])) == b"32X1"
    assert encode_counts(np.array([5, 1, 2, 1, 1])) == b"5120O"
    assert decode_counts(b"5120O") == [5, 1, 2, 1, 1]


@pytest.mark.parametrize("seed", range(4))
def test_masks_round_trip_through_the_string(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask = rng.uniform(size=(37, 53)) > (0.2 + 0.15 * seed)
    mask[0, 0] = bool(seed % 2)  # runs starting with ones and with zeros
    counts = run_lengths(mask)
    assert counts.sum() == mask.size and (counts[1:] > 0).all()
    np.testing.assert_array_equal(decode_mask(encode_counts(counts), 37, 53), mask)


def test_a_count_that_does_not_cover_the_image_is_refused() -> None:
    with pytest.raises(ValueError, match="covers 5 pixels, not 2 x 3"):
        decode_mask(encode_counts(np.array([2, 3])), 2, 3)


def test_masks_are_scaled_past_the_letterbox_and_cropped_to_their_box() -> None:
    # One prototype, positive on its left half: a 200 x 100 (w x h) source letterboxed into 64 x 64 has 16 rows of
    # padding above and below (4 prototype rows of 16), which must not stretch the mask.
    protos = np.full((1, 16, 16), -1.0, dtype=np.float32)
    protos[0, 4:12, :8] = 1.0
    boxes = np.array([[0, 0, 200, 100], [20.5, 10, 60, 30]], dtype=np.float32)
    whole, small = source_masks(protos, np.array([[1.0], [1.0]]), boxes, (100, 200))
    assert box_windows(boxes, (100, 200)) == [(0, 0, 200, 100), (21, 10, 60, 30)]
    assert whole.shape == (100, 200) and small.shape == (20, 39) and small.all()
    assert whole[:, :95].all() and not whole[:, 105:].any()


def test_a_window_is_the_same_pixels_as_resizing_the_whole_plane() -> None:
    import cv2

    plane = np.random.default_rng(1).normal(size=(40, 60)).astype(np.float32)
    full = cv2.resize(plane, (250, 170), interpolation=cv2.INTER_LINEAR)
    from generator.serving.masks import _window

    np.testing.assert_allclose(_window(plane, (170, 250), (30, 7, 240, 170)), full[7:170, 30:240], atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_the_runs_of_a_window_are_those_of_the_whole_mask(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask = np.zeros((30, 40), dtype=bool)
    top, left = int(rng.integers(0, 10)), int(rng.integers(0, 10))
    bottom, right = (30, 40) if seed % 2 else (int(rng.integers(top + 1, 31)), int(rng.integers(left + 1, 41)))
    mask[top:bottom, left:right] = rng.uniform(size=(bottom - top, right - left)) > 0.3
    mask[top:bottom, left] = True  # whole columns: runs that go on into the next column
    flat = mask.ravel(order="F").astype(np.int8)
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
    expected = np.diff(bounds) if not flat[0] else np.concatenate([[0], np.diff(bounds)])
    got = window_run_lengths(mask[top:bottom, left:right], top, left, (30, 40))
    np.testing.assert_array_equal(got, expected)
