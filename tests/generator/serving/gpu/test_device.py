"""On a CUDA GPU only: the real kernel and nvImageCodec against the CPU path.

CI has no GPU, so these skip there; they ran on the lent H200 (``tools/gpu/gpu_probe.py`` runs them), and
the results are committed in docs/results/gpu/2026-12-01-h200-probe.json.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from generator.serving.batch import prepare_batch
from generator.serving.gpu.decode import DecodedImage
from generator.serving.gpu.geometry import letterbox_reference, plan_image
from tests.fixtures.image_corpus import bad_images, encode, scene, with_exif, zoo

RESULTS = "docs/results/gpu/2026-12-01-h200-probe.json"


def _gpu() -> str | None:
    """None when CuPy, nvImageCodec and a GPU are all here, else what is missing."""
    for module in ("cupy", "nvidia.nvimgcodec"):
        try:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed"
        except ModuleNotFoundError:
            return f"{module} is not installed"
    import cupy

    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA GPU"
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return f"no CUDA GPU ({exc})"
    return None


MISSING = _gpu()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"needs a CUDA GPU with CuPy and nvImageCodec "
                                f"({MISSING}); the H200 run is recorded in {RESULTS}")


def device_image(image: np.ndarray, padding: int = 40) -> DecodedImage:
    import cupy

    height, width = image.shape[:2]
    buffer = cupy.zeros((height, width * 3 + padding), dtype=cupy.uint8)
    buffer[:, : width * 3] = cupy.asarray(image.reshape(height, width * 3))
    return DecodedImage(buffer, int(buffer.data.ptr), width * 3 + padding, width, height)


@pytest.mark.parametrize("target", [(640, 640), (384, 640), (33, 31)])
def test_kernel_equals_the_reference_model(target: tuple[int, int]) -> None:
    import cupy

    from generator.serving.gpu.letterbox import GpuLetterbox

    rng = np.random.default_rng(0)
    sizes = [(720, 1280, 1), (720, 1280, 2), (1080, 1920, 2), (2160, 3840, 4), (960, 1280, 8), (37, 101, 1),
             (1, 1, 1), (5000, 3, 1)]
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w, _ in sizes]
    plans = [plan_image(w, h, target, f) for h, w, f in sizes]
    slots = list(range(len(sizes)))[::-1]
    out = cupy.full((len(sizes), *target, 3), 7, dtype=cupy.uint8)
    sources = [device_image(image) for image in images]
    GpuLetterbox()(sources, plans, slots, out)
    host = out.get()
    for image, plan, slot in zip(images, plans, slots, strict=True):
        np.testing.assert_array_equal(host[slot], letterbox_reference(image, plan, target))


@pytest.mark.parametrize("reduced", [False, True])
def test_preprocessor_agrees_with_the_cpu_path(reduced: bool) -> None:
    from generator.serving.gpu import GpuPreprocessor

    good, bad = zoo(), bad_images()
    names = [*good, *bad]
    encoded = [good.get(n) or bad[n] for n in names]
    encoded += [encode(scene(720, 1280, 1), ".jpg"), with_exif(encode(scene(1080, 1920, 2), ".jpg"), 3)]
    names += ["jpeg-1280x720", "jpeg-1920x1080-exif3"]
    target = (640, 640)
    gpu = GpuPreprocessor(target, reduced_decode=reduced).prepare_batch(encoded)
    cpu = prepare_batch(encoded, target, reduced_decode=reduced)
    assert gpu.index == cpu.index and gpu.errors == cpu.errors
    np.testing.assert_array_equal(gpu.letterbox, cpu.letterbox)
    images = gpu.images.get()
    for slot, position in enumerate(gpu.index):
        diff = np.abs(images[slot].astype(int) - cpu.images[slot])
        if position in gpu.cpu_path:
            assert not diff.any(), names[position]
        else:  # nvJPEG's IDCT and upsampling are not libjpeg's; an orientation mistake would be far larger
            assert diff.mean() < 2.0, (names[position], diff.mean())
    decoded_on_gpu = {names[p] for p in gpu.index if p not in gpu.cpu_path}
    # The hardware engine takes baseline JPEGs; progressive ones go to CUDA nvJPEG (or the CPU path without it).
    assert {"jpeg", "jpeg-exif6", "jpeg-1920x1080-exif3"} <= decoded_on_gpu
