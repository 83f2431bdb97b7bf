"""The two-stage crops: save_one_box's corners on hand-made boxes and on the boxes Ultralytics cut (recorded),
and the crop batch at the edges (no box, more boxes than the cap, a tiny box at the border)."""

from __future__ import annotations

import numpy as np
import pytest

from generator.serving.crop import resize_crop
from generator.serving.two_stage import crop_boxes, crop_corners
from tests.fixtures.ultralytics.predict import SCENES
from tests.integration.two_stage import reference


@pytest.mark.parametrize(("box", "corners"), [
    # centre (150, 100), size 100 * 1.02 + 10 = 112: +-56
    ((100.0, 50.0, 200.0, 150.0), (94, 44, 206, 156)),
    # a 1-pixel box at the top-left corner: 1 * 1.02 + 10 = 11.02, the corners -5.01 and 5.51 truncate to -5 and 5,
    # clipped to 0
    ((0.0, 0.0, 1.0, 1.0), (0, 0, 6, 6)),
    # at the bottom-right border: 10 * 1.02 + 10 = 20.2, +-10.1 around (635, 475), clipped to 640 x 480
    ((630.0, 470.0, 640.0, 480.0), (624, 464, 640, 480)),
    # fractional corners truncate, never round: centre (12.3, 25.2), size (13.468, 19.792), so x1 = 5.566 -> 5,
    # y1 = 15.304 -> 15, x2 = 19.034 -> 19, y2 = 35.096 -> 35
    ((10.6, 20.4, 14.0, 30.0), (5, 15, 19, 35)),
    # a zero-size box still gets the 10-pixel pad
    ((320.0, 240.0, 320.0, 240.0), (315, 235, 325, 245)),
])
def test_corners_are_save_one_box_ones(box: tuple[float, ...], corners: tuple[int, ...]) -> None:
    assert crop_corners(np.array([box]), 640, 480)[0].tolist() == list(corners)


def test_corners_equal_the_ones_ultralytics_cut_on_the_served_boxes() -> None:
    checked = 0
    for (_, width, height), scene in zip(SCENES, reference()["scenes"], strict=True):
        if scene["boxes"]:
            got = crop_corners(np.array(scene["boxes"], dtype=np.float32), width, height)
            assert got.tolist() == scene["corners"]
            checked += len(got)
    assert checked >= 40


def _image(height: int = 48, width: int = 64) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_each_crop_is_the_classifier_input_of_its_slice() -> None:
    image = _image()
    batch = crop_boxes(image, np.array([[10.0, 5.0, 30.0, 40.0], [0.0, 0.0, 1.0, 1.0]]), 16, 4)
    assert batch.count == 2 and batch.crops.shape == (4, 16, 16, 3)
    for row, (x1, y1, x2, y2) in enumerate(crop_corners(np.array([[10.0, 5.0, 30.0, 40.0], [0, 0, 1, 1]]), 64, 48)):
        expected, _ = resize_crop(image[y1:y2, x1:x2], 16)
        np.testing.assert_array_equal(batch.crops[row], expected)
    assert not batch.crops[2:].any()


def test_a_tiny_box_at_the_border_is_cut_from_what_lies_inside() -> None:
    image = _image()
    batch = crop_boxes(image, np.array([[63.5, 47.5, 64.0, 48.0]]), 8, 1)
    x1, y1, x2, y2 = crop_corners(np.array([[63.5, 47.5, 64.0, 48.0]]), 64, 48)[0]
    assert (x2, y2) == (64, 48) and 0 < x2 - x1 < 10 and 0 < y2 - y1 < 10
    np.testing.assert_array_equal(batch.crops[0], resize_crop(image[y1:y2, x1:x2], 8)[0])


def test_no_boxes_and_more_boxes_than_the_cap() -> None:
    image = _image()
    empty = crop_boxes(image, np.zeros((0, 4), dtype=np.float32), 8, 3)
    assert empty.count == 0 and not empty.crops.any()
    boxes = np.array([[i, i, i + 20.0, i + 20.0] for i in range(5)], dtype=np.float32)
    capped = crop_boxes(image, boxes, 8, 3)  # the first three (the NMS step's score order) only
    assert capped.count == 3
    np.testing.assert_array_equal(capped.crops, crop_boxes(image, boxes[:3], 8, 3).crops)


def test_a_box_wholly_outside_the_image_gets_a_black_crop() -> None:
    batch = crop_boxes(_image(), np.array([[500.0, 500.0, 600.0, 600.0]]), 8, 1)
    assert batch.count == 1 and not batch.crops.any()
