"""The synthetic scene generator: determinism, tight in-image boxes, valid COCO output."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from generator.synthetic import CLASS_NAMES, Scene, encode, make_scene, write_dataset

SIZES = [(640, 480), (1280, 720), (320, 320), (480, 640)]


def _scenes(seed: int, n: int, width: int = 640, height: int = 480) -> list[Scene]:
    rng = np.random.default_rng(seed)
    return [make_scene(rng, width, height) for _ in range(n)]


def test_same_seed_same_scenes_and_different_seed_differs() -> None:
    a, b, c = _scenes(7, 3), _scenes(7, 3), _scenes(8, 3)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.image, y.image)
        assert np.array_equal(x.boxes, y.boxes)
        assert np.array_equal(x.classes, y.classes)
    assert not np.array_equal(a[0].image, c[0].image)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_scene_types_shapes_and_boxes_inside_image(width: int, height: int) -> None:
    for scene in _scenes(width * height, 5, width, height):
        assert scene.image.shape == (height, width, 3) and scene.image.dtype == np.uint8
        assert scene.boxes.dtype == np.float32 and scene.boxes.shape == (len(scene.classes), 4)
        assert scene.classes.dtype == np.int32
        assert len(scene.classes) >= 1
        assert ((scene.classes >= 0) & (scene.classes < len(CLASS_NAMES))).all()
        x1, y1, x2, y2 = scene.boxes.T
        assert (x1 >= 0).all() and (y1 >= 0).all() and (x2 <= width).all() and (y2 <= height).all()
        assert (x2 > x1).all() and (y2 > y1).all()


def test_object_sizes_span_the_documented_range() -> None:
    sides = []
    for scene in _scenes(3, 40):
        sides.extend(np.maximum(scene.boxes[:, 2] - scene.boxes[:, 0], scene.boxes[:, 3] - scene.boxes[:, 1]))
    sides_frac = np.array(sides) / 480
    assert sides_frac.max() <= 0.42
    assert sides_frac.min() < 0.08 and sides_frac.max() > 0.3  # both small and large objects occur
    assert len(set(np.concatenate([s.classes for s in _scenes(3, 40)]).tolist())) == len(CLASS_NAMES)


def test_boxes_are_tight_around_the_drawn_shape() -> None:
    """On a clean, flat background the box is exactly the bounding box of the pixels that changed."""
    checked = 0
    for seed in range(120):
        scene = make_scene(np.random.default_rng(seed), 320, 240, max_objects=1, clutter=False)
        image = scene.image.astype(np.int16)
        background = image[0, 0]
        if not (image[0] == background).all() or not (image[:, 0] == background).all():
            continue  # gradient or stripes: the background is not one colour
        ys, xs = np.nonzero(np.abs(image - background).sum(axis=2) > 0)
        assert xs.size > 0
        assert scene.boxes[0].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        checked += 1
    assert checked >= 10, "too few flat-background scenes to check tightness"


def test_boxes_of_overlapping_shapes_cover_all_drawn_pixels_and_touch_them() -> None:
    """Several shapes on a clean flat background: every changed pixel lies in some box, and every box edge
    touches changed pixels (boxes of partly hidden shapes shrink to what is visible, not beyond)."""
    checked = 0
    for seed in range(200):
        scene = make_scene(np.random.default_rng(seed), 320, 240, max_objects=8, clutter=False)
        image = scene.image.astype(np.int16)
        background = image[0, 0]
        if (
            len(scene.boxes) < 3
            or not (image[0] == background).all()
            or not (image[:, 0] == background).all()
        ):
            continue
        changed = np.abs(image - background).sum(axis=2) > 0
        covered = np.zeros_like(changed)
        for x1, y1, x2, y2 in scene.boxes.astype(int):
            covered[y1:y2, x1:x2] = True
            box = changed[y1:y2, x1:x2]
            assert box[0].any() and box[-1].any() and box[:, 0].any() and box[:, -1].any()
        assert not (changed & ~covered).any()
        checked += 1
    assert checked >= 5


def test_encode_round_trips_rgb() -> None:
    scene = _scenes(5, 1)[0]
    for fmt in (".png", ".bmp"):
        decoded = cv2.imdecode(np.frombuffer(encode(scene.image, fmt), np.uint8), cv2.IMREAD_COLOR)
        assert decoded is not None
        assert np.array_equal(decoded[..., ::-1], scene.image)
    jpeg = cv2.imdecode(np.frombuffer(encode(scene.image, ".jpg", 95), np.uint8), cv2.IMREAD_COLOR)
    assert jpeg is not None
    assert np.abs(jpeg[..., ::-1].astype(int) - scene.image).mean() < 12


def test_write_dataset_is_valid_coco(tmp_path) -> None:
    from faster_coco_eval import COCO

    path = write_dataset(tmp_path / "set", 6, seed=3, sizes=((640, 480), (320, 320)))
    coco_json = json.loads(path.read_text())
    assert [c["id"] for c in coco_json["categories"]] == list(range(len(CLASS_NAMES)))
    assert [c["name"] for c in coco_json["categories"]] == list(CLASS_NAMES)
    gt = COCO(str(path))
    assert len(gt.getImgIds()) == 6
    rng = np.random.default_rng(3)
    for image_id, size in zip(sorted(gt.getImgIds()), [(640, 480), (320, 320)] * 3, strict=True):
        info = gt.loadImgs(image_id)[0]
        assert (info["width"], info["height"]) == size
        assert (tmp_path / "set" / info["file_name"]).is_file()
        scene = make_scene(rng, *size)  # the same stream write_dataset used
        anns = gt.loadAnns(gt.getAnnIds(imgIds=image_id))
        assert len(anns) == len(scene.boxes)
        for ann, box, cls in zip(anns, scene.boxes, scene.classes, strict=True):
            assert ann["category_id"] == cls and ann["iscrowd"] == 0
            assert np.allclose(ann["bbox"], [box[0], box[1], box[2] - box[0], box[3] - box[1]])
            assert ann["area"] == pytest.approx(ann["bbox"][2] * ann["bbox"][3])


def test_rejects_impossible_sizes() -> None:
    with pytest.raises(ValueError, match="at least 32x32"):
        make_scene(np.random.default_rng(0), 16, 480)
    with pytest.raises(ValueError, match="max_objects"):
        make_scene(np.random.default_rng(0), 640, 480, max_objects=0)
