"""The soak's bad images are what they claim: the serving code's own header check refuses each with its message."""

from __future__ import annotations

import pytest

from generator.serving.images import ImageError, ImageLimits, check_header
from loadtest.hostile import bad_images, jpeg_declaring, png_declaring
from loadtest.images import synthetic_images


@pytest.mark.parametrize("image", bad_images(), ids=lambda image: image.kind)
def test_each_bad_image_is_refused_with_its_expected_message(image):
    with pytest.raises(ImageError) as refused:
        check_header(image.data, ImageLimits())
    assert image.expected in str(refused.value)


def test_bombs_are_small_and_declare_huge_sizes():
    assert len(png_declaring(50000, 50000)) < 100
    (jpeg,) = synthetic_images([(64, 48)], per_size=1)
    bomb = jpeg_declaring(jpeg, 30000, 20000)
    assert len(bomb) == len(jpeg)
    with pytest.raises(ImageError, match="declares 30000x20000 pixels"):
        check_header(bomb, ImageLimits())


def test_one_of_each_kind():
    assert [image.kind for image in bad_images()] == ["truncated_jpeg", "garbage", "png_bomb_header",
                                                       "jpeg_bomb_header"]
