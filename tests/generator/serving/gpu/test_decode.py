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


class FakeNvimgcodec:
    """Records what GpuJpegDecoder asks nvImageCodec for."""

    class BackendKind:
        HW_GPU_ONLY, GPU_ONLY, HYBRID_CPU_GPU, CPU_ONLY = "HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY"

    class LoadHintPolicy:
        FIXED, ADAPTIVE_MINIMIZE_IDLE_TIME = "FIXED", "ADAPTIVE_MINIMIZE_IDLE_TIME"

    class ColorSpec:
        SRGB = "SRGB"

    class SampleFormat:
        I_BGR = "I_BGR"

    def __init__(self) -> None:
        self.decoders: list[dict[str, object]] = []

    @staticmethod
    def Backend(kind: str, load_hint: float = 1.0, load_hint_policy: str = "FIXED") -> tuple[str, float, str]:
        return kind, load_hint, load_hint_policy

    def Decoder(self, **kwargs: object) -> object:
        self.decoders.append(kwargs)
        return object()

    @staticmethod
    def DecodeParams(**kwargs: object) -> dict[str, object]:
        return kwargs


@pytest.mark.parametrize(("options", "backends", "decoder_options"), [
    # nvJPEG's CUDA decoder is filed under HYBRID_CPU_GPU: GPU_ONLY finds no JPEG decoder (seen on the H200).
    (DecoderOptions(backend="cuda"), [("HYBRID_CPU_GPU", 1.0, "FIXED")], ":fancy_upsampling=1"),
    (DecoderOptions(backend="hardware", fancy_upsampling=False), [("HW_GPU_ONLY", 1.0, "FIXED")], ""),
    (DecoderOptions(hardware_load=0.7, adaptive_load=True, gpu_huffman=True),
     [("HW_GPU_ONLY", 0.7, "ADAPTIVE_MINIMIZE_IDLE_TIME"), ("HYBRID_CPU_GPU", 1.0, "FIXED")],
     ":fancy_upsampling=1 nvjpeg_cuda_decoder:hybrid_huffman_threshold=0"),
])
def test_decoder_backends(monkeypatch: pytest.MonkeyPatch, options: DecoderOptions,
                          backends: list[tuple[str, float, str]], decoder_options: str) -> None:
    from generator.serving.gpu import decode

    fake = FakeNvimgcodec()
    monkeypatch.setattr(decode, "import_nvimgcodec", lambda: fake)
    decoder = decode.GpuJpegDecoder(options)
    (created,) = fake.decoders
    assert created["backends"] == backends and created["options"] == decoder_options
    assert created["max_num_cpu_threads"] == 1
    assert decoder._params == {"apply_exif_orientation": True, "color_spec": "SRGB", "allow_any_depth": False,
                               "sample_format": "I_BGR"}
