"""The GPU prepare_batch's logic on the host: NumPy stand-ins for the decoder and the kernel.

With OpenCV's full-resolution decode standing in for nvImageCodec, the GPU path must reproduce the CPU
path with reduced decode off exactly: order, slots, errors, letterbox parameters and pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from generator.serving.batch import prepare_batch
from generator.serving.batch import to_float_nchw as cpu_to_float_nchw
from generator.serving.gpu.batch import (
    GPU_BATCH_ERROR,
    GPU_DECODE_FAILED,
    GPU_SIZE_MISMATCH,
    NOT_GPU_FORMAT,
    DeviceParts,
    GpuPreprocessor,
    batch_to_host,
    slot_order,
    to_float_nchw,
    triage,
)
from generator.serving.gpu.decode import DecodedImage
from generator.serving.gpu.routing import gpu_decodable
from generator.serving.images import DEFAULT_LIMITS, check_header
from tests.fixtures.image_corpus import bad_images, encode, scene, with_exif, zoo

from .host_model import host_parts

TARGET = (96, 128)


def mixed_batch() -> tuple[list[str], list[bytes]]:
    good, bad = zoo(), bad_images()
    names = [*good, *bad]
    names = names[::2] + names[1::2]  # interleave good and bad
    encoded = [good.get(n) or bad[n] for n in names]
    return names, encoded


def test_triage_uses_the_cpu_header_checks_and_routes_jpegs() -> None:
    names, encoded = mixed_batch()
    routed = triage(encoded)
    cpu = prepare_batch(encoded, TARGET)
    header_errors = {p: m for p, m in cpu.errors.items() if "could not decode" not in m}
    assert routed.errors == header_errors
    for position in routed.gpu:
        assert names[position].startswith("jpeg")
    assert sorted(routed.gpu + routed.cpu + list(routed.errors)) == list(range(len(encoded)))


@pytest.mark.parametrize("reduced", [False, True])
def test_prepare_batch_matches_the_cpu_path(reduced: bool) -> None:
    names, encoded = mixed_batch()
    gpu = GpuPreprocessor(TARGET, reduced_decode=reduced, parts=host_parts()).prepare_batch(encoded)
    cpu = prepare_batch(encoded, TARGET, reduced_decode=reduced)
    assert gpu.index == cpu.index and gpu.errors == cpu.errors
    np.testing.assert_array_equal(gpu.letterbox, cpu.letterbox)
    np.testing.assert_array_equal(gpu.images, cpu.images)  # the zoo is small: no reduced decode happens
    for position in gpu.cpu_path:
        assert not names[position].startswith("jpeg") or names[position] == "jpeg-bad-huffman-table"
    assert gpu.cpu_path[names.index("png")] == NOT_GPU_FORMAT
    assert gpu.cpu_path[names.index("jpeg-bad-huffman-table")] == GPU_DECODE_FAILED


@pytest.mark.parametrize("reduced", [False, True])
def test_large_jpegs(reduced: bool) -> None:
    encoded = [encode(scene(720, 1280, 1), ".jpg"), encode(scene(1080, 1920, 2), ".jpg"),
               with_exif(encode(scene(960, 1280, 3), ".jpg"), 6), encode(scene(720, 1280, 4), ".png")]
    target = (640, 640)
    gpu = GpuPreprocessor(target, reduced_decode=reduced, parts=host_parts()).prepare_batch(encoded)
    cpu = prepare_batch(encoded, target, reduced_decode=reduced)
    assert gpu.index == cpu.index == [0, 1, 2, 3] and not gpu.errors
    np.testing.assert_array_equal(gpu.letterbox, cpu.letterbox)
    diff = np.abs(gpu.images.astype(int) - cpu.images)
    if reduced:  # block average vs libjpeg's DCT scaling; the PNG is the CPU path's own
        assert diff[:3].mean() < 1.0 and not diff[3].any()
    else:
        assert not diff.any()


def test_a_refused_jpeg_is_decoded_by_the_cpu_path() -> None:
    jpeg = encode(scene(64, 80), ".jpg")
    other = encode(scene(64, 80, 5), ".jpg")
    gpu = GpuPreprocessor(TARGET, parts=host_parts(refuse=[jpeg])).prepare_batch([other, jpeg])
    cpu = prepare_batch([other, jpeg], TARGET)
    assert gpu.cpu_path == {1: GPU_DECODE_FAILED} and gpu.index == [0, 1]
    np.testing.assert_array_equal(gpu.images, cpu.images)


def test_a_decoder_ignoring_exif_is_caught_by_the_size_check() -> None:
    rotated = with_exif(encode(scene(64, 80), ".jpg"), 6)
    gpu = GpuPreprocessor(TARGET, parts=host_parts(ignore_exif=True)).prepare_batch([rotated])
    assert gpu.cpu_path == {0: GPU_SIZE_MISMATCH}
    np.testing.assert_array_equal(gpu.images, prepare_batch([rotated], TARGET).images)


def test_a_decoder_exception_sends_the_batch_to_the_cpu_path() -> None:
    parts = host_parts()

    def broken(encoded: Sequence[bytes], stream: int) -> list[DecodedImage | None]:
        raise RuntimeError("nvJPEG: CUDA out of memory")

    parts = DeviceParts(broken, parts.letterbox, parts.xp, parts.stream)
    names, encoded = mixed_batch()
    gpu = GpuPreprocessor(TARGET, parts=parts).prepare_batch(encoded)
    cpu = prepare_batch(encoded, TARGET)
    assert gpu.index == cpu.index and gpu.errors == cpu.errors
    np.testing.assert_array_equal(gpu.images, cpu.images)
    assert {gpu.cpu_path[p] for p, n in enumerate(names) if gpu_decodable_name(n)} == {GPU_BATCH_ERROR}


def gpu_decodable_name(name: str) -> bool:
    return name.startswith("jpeg")


def test_empty_and_all_bad_batches() -> None:
    pre = GpuPreprocessor(TARGET, parts=host_parts())
    for encoded in ([], [b"", b"x"]):
        batch = pre.prepare_batch(encoded)
        assert batch.images.shape == (0, *TARGET, 3) and batch.letterbox.shape == (0, 6)
        assert batch.index == [] and set(batch.errors) == set(range(len(encoded)))


def test_slot_order() -> None:
    assert slot_order([5, 1], [3], []) == {1: 0, 3: 1, 5: 2}


def test_to_float_nchw_matches_the_cpu_path() -> None:
    images = np.random.default_rng(0).integers(0, 256, (2, 8, 6, 3), dtype=np.uint8)
    np.testing.assert_array_equal(to_float_nchw(images, np.float16, xp=np), cpu_to_float_nchw(images, np.float16))


def test_the_host_handoff_copies_the_images_once_and_keeps_the_rest() -> None:
    """--gpu-handoff host: one asnumpy of the whole batch; slots, errors and letterbox parameters untouched."""
    copies: list[tuple[int, ...]] = []

    class Device:  # CuPy's asnumpy, counted
        @staticmethod
        def asnumpy(array: np.ndarray) -> np.ndarray:
            copies.append(array.shape)
            return np.array(array, copy=True)

    _, encoded = mixed_batch()
    batch = GpuPreprocessor(TARGET, parts=host_parts()).prepare_batch(encoded)
    host = batch_to_host(batch, xp=Device)
    assert copies == [batch.images.shape] and host.images is not batch.images
    np.testing.assert_array_equal(host.images, batch.images)
    assert (host.index, host.errors, host.cpu_path, host.reasons) == (batch.index, batch.errors, batch.cpu_path,
                                                                      batch.reasons)
    assert host.letterbox is batch.letterbox


def test_zoo_formats_routed_as_documented() -> None:
    routed = {name: gpu_decodable(check_header(data, DEFAULT_LIMITS), data) for name, data in zoo().items()}
    assert {n for n, gpu in routed.items() if gpu} == {n for n in routed if n.startswith("jpeg")}
