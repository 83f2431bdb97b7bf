"""Batched JPEG decoding on the GPU with nvImageCodec: the hardware JPEG engine, then CUDA nvJPEG.

Only GPU backends are enabled. An image they cannot decode comes back as ``None`` (nvImageCodec's own
per-image failure report) and the caller decodes it on the CPU path, which either succeeds or raises the
CPU path's own message. The decoder writes interleaved 8-bit BGR with EXIF orientation applied: the
layout ``cv2.imdecode(IMREAD_COLOR)`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .runtime import GpuUnavailableError, import_nvimgcodec

BACKENDS = ("auto", "hardware", "cuda")


@dataclass(frozen=True)
class DecoderOptions:
    device_id: int = 0
    # hardware: the GPU's JPEG engine alone (A100, H100, H200 have one); what it cannot decode (progressive JPEGs,
    # for one) goes to the CPU path. auto: the engine takes ``hardware_load`` of each batch, CUDA nvJPEG the rest.
    # Measured on the H200 (whole prepare_batch, 1280x720, batch 8 / 32): hardware 4,368 / 6,346 img/s, auto
    # 2,450 / 477 (its CUDA share decodes Huffman on one host thread); docs/results/gpu/.
    backend: str = "hardware"
    hardware_load: float = 0.9  # DALI's default split; measured on the H200 by tools.gpu.gpu_probe
    # Re-balance the split between the two every batch to minimise idle time (nvImageCodec's adaptive policy).
    adaptive_load: bool = False
    # libjpeg's smooth chroma upsampling, which OpenCV uses; nvJPEG's CUDA default replicates chroma samples.
    fancy_upsampling: bool = True
    cpu_threads: int = 1  # nvImageCodec's host threads (parsing, hybrid Huffman); Triton runs other steps beside it
    # nvJPEG's CUDA decoder does the Huffman stage of smaller images on the host ("hybrid", below about a
    # megapixel: a 1280x720 frame is one of them); True moves it to the GPU for every image.
    gpu_huffman: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"decoder backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if not 0.0 <= self.hardware_load <= 1.0:
            raise ValueError(f"hardware_load must be within 0..1, not {self.hardware_load}")
        if self.cpu_threads < 1 or self.device_id < 0:
            raise ValueError("cpu_threads must be at least 1 and device_id not negative")


@dataclass(frozen=True)
class DecodedImage:
    """A decoded H x W x 3 uint8 image in device memory; ``handle`` owns the memory."""

    handle: Any
    pointer: int
    pitch: int  # bytes from one row to the next (nvImageCodec may pad rows)
    width: int
    height: int


def describe(image: Any) -> DecodedImage | None:
    """Read an image's ``__cuda_array_interface__``; ``None`` unless it is H x W x 3 uint8 on the device."""
    interface = getattr(image, "__cuda_array_interface__", None)
    if not isinstance(interface, dict):
        return None
    shape, strides = tuple(interface.get("shape", ())), interface.get("strides")
    if len(shape) != 3 or shape[2] != 3 or interface.get("typestr") != "|u1":
        return None
    height, width = int(shape[0]), int(shape[1])
    if strides is not None and tuple(strides[1:]) != (3, 1):
        return None
    pitch = int(strides[0]) if strides is not None else width * 3
    pointer = int(interface["data"][0])
    if height < 1 or width < 1 or pitch < width * 3 or pointer == 0:
        return None
    return DecodedImage(image, pointer, pitch, width, height)


class GpuJpegDecoder:
    """One nvImageCodec decoder (it keeps CUDA streams, nvJPEG state and buffers between batches)."""

    def __init__(self, options: DecoderOptions | None = None) -> None:
        self.options = options or DecoderOptions()
        nvimgcodec = import_nvimgcodec()
        self._nvimgcodec = nvimgcodec
        kind, policy = nvimgcodec.BackendKind, nvimgcodec.LoadHintPolicy
        # nvImageCodec files nvJPEG's CUDA decoder under HYBRID_CPU_GPU (it may run Huffman decoding on the
        # host); GPU_ONLY holds no JPEG decoder at all. Only JPEGs are ever sent here, and the CPU-only JPEG
        # decoder (libjpeg-turbo) is not enabled: what the GPU cannot decode goes to the CPU path instead.
        if self.options.backend == "auto":
            split = policy.ADAPTIVE_MINIMIZE_IDLE_TIME if self.options.adaptive_load else policy.FIXED
            hardware = nvimgcodec.Backend(kind.HW_GPU_ONLY, load_hint=self.options.hardware_load,
                                          load_hint_policy=split)
            backends = [hardware, nvimgcodec.Backend(kind.HYBRID_CPU_GPU)]
        elif self.options.backend == "hardware":
            backends = [nvimgcodec.Backend(kind.HW_GPU_ONLY)]
        else:
            backends = [nvimgcodec.Backend(kind.HYBRID_CPU_GPU)]
        decoder_options = " ".join(
            ([":fancy_upsampling=1"] if self.options.fancy_upsampling else [])
            + (["nvjpeg_cuda_decoder:hybrid_huffman_threshold=0"] if self.options.gpu_huffman else [])
        )
        try:
            self._decoder = nvimgcodec.Decoder(
                device_id=self.options.device_id,
                max_num_cpu_threads=self.options.cpu_threads,
                backends=backends,
                options=decoder_options,
            )
        except Exception as exc:  # nvImageCodec raises plain RuntimeErrors without a GPU
            raise GpuUnavailableError(f"nvImageCodec could not create a GPU decoder on device "
                                      f"{self.options.device_id}: {exc}") from exc
        self._params = nvimgcodec.DecodeParams(
            apply_exif_orientation=True,
            color_spec=nvimgcodec.ColorSpec.SRGB,
            allow_any_depth=False,
            sample_format=nvimgcodec.SampleFormat.I_BGR,
        )

    def decode(self, encoded: Sequence[bytes], cuda_stream: int = 0) -> list[DecodedImage | None]:
        """Decode a batch; the pixels are ready in order on ``cuda_stream``. ``None`` marks a failure."""
        streams: list[Any] = []
        positions: list[int] = []
        for position, data in enumerate(encoded):
            try:
                streams.append(self._nvimgcodec.CodeStream(data))
            except Exception:  # noqa: BLE001 -- an unparsable stream is one failed image, as in a batch
                continue
            positions.append(position)
        results: list[DecodedImage | None] = [None] * len(encoded)
        if not streams:
            return results
        images = self._decoder.decode(streams, params=self._params, cuda_stream=cuda_stream)
        for position, image in zip(positions, images, strict=True):
            results[position] = describe(image) if image is not None else None
        return results
