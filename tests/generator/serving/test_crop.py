"""The classifier's centre crop equals what Ultralytics' classify predict feeds its network (torchvision's Resize and
CenterCrop on a PIL image): pixel for pixel, on the recorded scenes and on sizes that round every way."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from generator.serving.batch import prepare_batch
from generator.serving.crop import center_crop_into, crop_geometry, resize_crop
from generator.serving.letterbox import boxes_to_source
from generator.synthetic import encode
from tests.fixtures.ultralytics.predict import digest, recorded_predictions, scene_images

SIZE = 320


def test_the_crop_of_each_scene_is_the_one_ultralytics_fed_its_classifier() -> None:
    recorded = recorded_predictions()["models"]["classify-static"]["images"]
    for index, (image, entry) in enumerate(zip(scene_images(), recorded, strict=True)):
        crop, _ = resize_crop(image, SIZE)
        assert list(crop.shape) == entry["crop_shape"]
        assert digest(np.ascontiguousarray(crop).tobytes()) == entry["crop_sha256"], f"scene {index}"


@pytest.mark.parametrize(("height", "width"), [(480, 640), (721, 1279), (640, 479), (500, 500), (320, 320),
                                               (200, 150), (37, 1001), (321, 320), (2999, 4001), (1, 7)])
def test_the_crop_equals_pillows_bilinear_resize_and_torchvisions_centre_crop(height: int, width: int) -> None:
    image = np.random.default_rng(height * width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    resized_w, resized_h, left, top = crop_geometry(height, width, SIZE)
    assert min(resized_w, resized_h) == SIZE
    want = np.asarray(Image.fromarray(image).resize((resized_w, resized_h), Image.Resampling.BILINEAR))
    got, _ = resize_crop(image, SIZE)
    np.testing.assert_array_equal(got, want[top:top + SIZE, left:left + SIZE])


def test_the_placement_maps_input_pixels_back_to_the_source() -> None:
    image = scene_images()[1]  # 1280 x 720: resized to 568 x 320, 124 columns cut on the left
    out = np.empty((SIZE, SIZE, 3), dtype=np.uint8)
    placed = center_crop_into(image, out).as_array()
    np.testing.assert_allclose(placed[:4], [-124, 0, 568 / 1280, 320 / 720], rtol=1e-6)
    corners = boxes_to_source(np.array([[0.0, 0.0, SIZE, SIZE]], dtype=np.float32), placed)
    np.testing.assert_allclose(corners, [[124 * 1280 / 568, 0, (124 + SIZE) * 1280 / 568, 720]], rtol=1e-5)


def test_a_batch_crops_every_image_and_refuses_a_bad_one_alone() -> None:
    images = [encode(image, ".png") for image in scene_images()[:3]]
    batch = prepare_batch([images[0], b"not an image", images[2]], (SIZE, SIZE), reduced_decode=False,
                          place=center_crop_into)
    assert batch.index == [0, 2] and list(batch.errors) == [1]
    for slot, position in enumerate(batch.index):
        # decoded BGR, cropped per channel: the scene's RGB crop reversed
        np.testing.assert_array_equal(batch.images[slot], resize_crop(scene_images()[position], SIZE)[0][..., ::-1])


def test_a_crop_needs_a_square_input() -> None:
    with pytest.raises(ValueError, match="square input"):
        center_crop_into(np.zeros((10, 10, 3), np.uint8), np.empty((320, 256, 3), np.uint8))
