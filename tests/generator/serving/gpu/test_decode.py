"""Decoder options, device-image descriptions, and the lazy GPU imports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from generator.serving.gpu.decode import DecoderOptions, describe
from generator.serving.gpu.runtime import GpuUnavailableError


class FakeImage:
    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None, typestr: str = "|u1") -> None:
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (123456, False), "version": 3}


def test_describe_contiguous_and_padded_images() -> None:
    plain = describe(FakeImage((720, 1280, 3), None))
    assert plain is not None and (plain.width, plain.height, plain.pitch, plain.pointer) == (1280, 720, 3840, 123456)
    padded = describe(FakeImage((720, 1280, 3), (4096, 3, 1)))
    assert padded is not None and padded.pitch == 4096


@pytest.mark.parametrize("image", [
    FakeImage((720, 1280, 4), None), FakeImage((720, 1280), None), FakeImage((720, 1280, 3), None, "<u2"),
    FakeImage((3, 720, 1280), (921600, 1280, 1)), FakeImage((720, 1280, 3), (100, 3, 1)), object(),
])
def test_describe_rejects_other_layouts(image: object) -> None:
    assert describe(image) is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"backend": "gpu"}, "backend must be one of"),
    ({"hardware_load": 1.5}, "hardware_load"),
    ({"cpu_threads": 0}, "cpu_threads"),
])
def test_decoder_options_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecoderOptions(**kwargs)  # type: ignore[arg-type]


def test_importing_the_package_loads_no_gpu_library() -> None:
    code = ("import sys, generator.serving.gpu, generator.serving.gpu.letterbox; "
            "assert not {'cupy', 'nvidia.nvimgcodec'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_missing_cupy_says_what_to_install() -> None:
    from generator.serving.gpu import GpuPreprocessor

    with pytest.raises(GpuUnavailableError, match="pip install 'cupy-cuda12x'"):
        GpuPreprocessor((640, 640))
