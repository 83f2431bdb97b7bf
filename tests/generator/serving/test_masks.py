"""Masks from prototypes (generator.serving.masks): COCO's compressed RLE both ways, and masks in source pixels.

The masks against Ultralytics' own predict are tests/integration/test_task_heads.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from clients.rle import decode_counts, decode_mask
from generator.serving.masks import encode_counts, run_lengths, source_masks


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
    masks = source_masks(protos, np.array([[1.0], [1.0]]), np.array([[0, 0, 200, 100], [20, 10, 60, 30]],
                                                                     dtype=np.float32), (100, 200))
    assert masks.shape == (2, 100, 200)
    assert masks[0, :, :95].all() and not masks[0, :, 105:].any()
    assert masks[1].sum() == 40 * 20 and masks[1, 10:30, 20:60].all()
