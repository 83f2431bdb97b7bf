"""The kernel's packed inputs: layout, and the kernel (transcribed to NumPy) against the reference model."""

from __future__ import annotations

import numpy as np
import pytest

from generator.serving.gpu.geometry import letterbox_reference, plan_image
from generator.serving.gpu.letterbox import _KERNEL_SOURCE, META_FIELDS, META_LEN, pack_batch

from .host_model import padded, run_kernel_model


def random_image(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_pack_batch_layout() -> None:
    plans = [plan_image(1280, 720, (640, 640)), plan_image(100, 300, (640, 640), 1)]
    meta, tables = pack_batch(plans, [3, 0])
    assert meta.shape == (2, META_LEN) and meta.dtype == np.int32 and tables.dtype == np.int32
    field = dict(zip(META_FIELDS, meta[0], strict=True))
    assert field["slot"] == 3 and field["x_offset"] == 0 and field["y_offset"] == 4 * 640
    assert (field["resized_width"], field["resized_height"], field["left"], field["top"]) == (640, 360, 0, 140)
    second = dict(zip(META_FIELDS, meta[1], strict=True))
    assert second["x_offset"] == 4 * (640 + 360) and second["slot"] == 0
    assert len(tables) == 4 * (640 + 360) + 4 * (plans[1].resized_width + plans[1].resized_height)


def test_pack_batch_needs_a_slot_per_plan() -> None:
    with pytest.raises(ValueError, match="slots"):
        pack_batch([plan_image(10, 10, (8, 8))], [])


@pytest.mark.parametrize("target", [(640, 640), (64, 96), (33, 31)])
def test_kernel_model_matches_the_reference(target: tuple[int, int]) -> None:
    sizes = [(720, 1280, 1), (720, 1280, 2), (1080, 1920, 2), (37, 101, 1), (5, 3, 1), (960, 1280, 8),
             (1, 1, 1), (333, 500, 4)]
    images = [random_image(h, w, i) for i, (h, w, _) in enumerate(sizes)]
    plans = [plan_image(w, h, target, f) for h, w, f in sizes]
    slots = list(range(len(sizes)))[::-1]
    meta, tables = pack_batch(plans, slots)
    out = np.zeros((len(sizes), *target, 3), dtype=np.uint8)
    run_kernel_model([padded(image) for image in images], meta, tables, out)
    for image, plan, slot in zip(images, plans, slots, strict=True):
        np.testing.assert_array_equal(out[slot], letterbox_reference(image, plan, target))


def test_kernel_source_defines_every_meta_field() -> None:
    for i, name in enumerate(META_FIELDS):
        assert f"#define F_{name.upper()} {i}\n" in _KERNEL_SOURCE
    assert 'extern "C" __global__ void letterbox_u8(' in _KERNEL_SOURCE
