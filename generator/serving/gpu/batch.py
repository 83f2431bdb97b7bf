"""The GPU ``prepare_batch``: many encoded images in, one letterboxed uint8 batch in device memory out.

Same contract as the CPU ``prepare_batch``: images keep their input order, a bad image gets the CPU path's
message and no slot, the rest go on. Every image passes the CPU path's header checks first. JPEGs the GPU
decoders take are decoded in one nvImageCodec batch and letterboxed by one kernel launch; every other image
(other formats, and JPEGs the GPU decoder refused) is decoded and letterboxed by the CPU path itself and
copied into its slot, so its pixels and its error message are the CPU path's exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..phases import Lap, no_lap
from ._cpu import (
    DEFAULT_LIMITS,
    PARAMS_LEN,
    ImageError,
    ImageHeader,
    ImageLimits,
    check_header,
    decode_image,
    letterbox_into,
    reduction_factor,
)
from .decode import DecodedImage, DecoderOptions, GpuJpegDecoder
from .geometry import SIMD_LANES, ImagePlan, plan_image
from .letterbox import GpuLetterbox
from .routing import gpu_decodable, jpeg_frame, upright_size
from .runtime import GpuUnavailableError, import_cupy

# Why an image went to the CPU path (GpuPreparedBatch.cpu_path).
NOT_GPU_FORMAT = "format"  # not a JPEG the GPU decoders take (see routing.gpu_decodable)
GPU_DECODE_FAILED = "gpu-decode-failed"  # nvImageCodec returned no image
GPU_SIZE_MISMATCH = "gpu-size-mismatch"  # the decoded size disagrees with the header and EXIF orientation
GPU_BATCH_ERROR = "gpu-batch-error"  # nvImageCodec raised for the whole batch


@dataclass(frozen=True)
class Triage:
    """Header checks done, each image assigned to a decoder; positions index the input batch."""

    gpu: list[int]
    cpu: list[int]
    errors: dict[int, str]
    headers: dict[int, ImageHeader]
    upright: dict[int, tuple[int, int]]  # GPU positions: (width, height) once EXIF orientation is applied
    reasons: dict[int, str] = field(default_factory=dict)  # rejected positions -> ImageError.reason


def triage(encoded: Sequence[bytes], limits: ImageLimits = DEFAULT_LIMITS) -> Triage:
    """Run the CPU path's header checks and route every image that passes them."""
    gpu: list[int] = []
    cpu: list[int] = []
    errors: dict[int, str] = {}
    reasons: dict[int, str] = {}
    headers: dict[int, ImageHeader] = {}
    upright: dict[int, tuple[int, int]] = {}
    for position, data in enumerate(encoded):
        try:
            header = check_header(data, limits)
        except ImageError as exc:
            errors[position], reasons[position] = str(exc), exc.reason
            continue
        headers[position] = header
        frame = jpeg_frame(data) if header.format == "jpeg" else None
        if frame is not None and gpu_decodable(header, data, frame):
            gpu.append(position)
            upright[position] = upright_size(header, data, frame)
        else:
            cpu.append(position)
    return Triage(gpu, cpu, errors, headers, upright, reasons)


def accept_decoded(decoded: DecodedImage | None, upright: tuple[int, int]) -> str | None:
    """``None`` when a GPU-decoded image can be used, else the reason it goes to the CPU path."""
    if decoded is None:
        return GPU_DECODE_FAILED
    if (decoded.width, decoded.height) != upright:
        return GPU_SIZE_MISMATCH
    return None


def slot_order(*groups: Sequence[int]) -> dict[int, int]:
    """Batch slot of each input position: all prepared images, in input order."""
    return {position: slot for slot, position in enumerate(sorted(p for group in groups for p in group))}


@dataclass(frozen=True)
class GpuPreparedBatch:
    images: Any  # cupy.ndarray uint8 [M, H, W, 3], BGR, letterboxed, in device memory
    letterbox: np.ndarray  # float32 [M, 6] on the host, see Letterbox.as_array
    index: list[int]  # position in the input of each of the M prepared images
    errors: dict[int, str]  # input position -> reason it was rejected (the CPU path's message)
    # input position -> why the CPU path decoded it (also for images it then rejected)
    cpu_path: dict[int, str] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)  # rejected positions -> ImageError.reason


@dataclass(frozen=True)
class DeviceParts:
    """What ``prepare_batch`` needs from the device; the CPU-only tests substitute NumPy stand-ins."""

    decode: Callable[[Sequence[bytes], int], list[DecodedImage | None]]  # (images, stream pointer)
    letterbox: Callable[[Sequence[DecodedImage], Sequence[ImagePlan], Sequence[int], Any], None]
    xp: Any  # the array module: cupy
    stream: Callable[[], Any]  # the current stream: ``.ptr`` and ``.synchronize()``

    @classmethod
    def cupy(cls, decoder: DecoderOptions | None = None, lanes: tuple[int, int] = SIMD_LANES) -> DeviceParts:
        cp = import_cupy()
        return cls(GpuJpegDecoder(decoder).decode, GpuLetterbox(lanes), cp, cp.cuda.get_current_stream)


class GpuPreprocessor:
    """Decoder, kernel and settings of one preprocess instance; ``prepare_batch`` is its one operation.

    ``reduced_decode`` follows the CPU option: a large JPEG is block-averaged by the factor the CPU path would
    decode it at (1/2, 1/4, 1/8) before the resize, so geometry and letterbox parameters match the CPU path
    exactly and pixels closely; without it the resize starts from the full decode, like
    ``--no-reduced-decode``.
    """

    def __init__(self, target: tuple[int, int], limits: ImageLimits = DEFAULT_LIMITS, reduced_decode: bool = True,
                 decoder: DecoderOptions | None = None, lanes: tuple[int, int] = SIMD_LANES, *,
                 parts: DeviceParts | None = None) -> None:
        self.target = target
        self.limits = limits
        self.reduced_decode = reduced_decode
        self.parts = parts if parts is not None else DeviceParts.cupy(decoder, lanes)

    @classmethod
    def on_device(cls, device_id: int, target: tuple[int, int], limits: ImageLimits = DEFAULT_LIMITS,
                  reduced_decode: bool = True) -> GpuPreprocessor:
        """A preprocessor for one Triton instance of KIND_GPU: CuPy and the decoder both on ``device_id``.

        The device becomes this thread's current CuPy device, so the output batches are allocated there.
        """
        import_cupy().cuda.Device(device_id).use()
        try:
            return cls(target, limits, reduced_decode, DecoderOptions(device_id=device_id))
        except GpuUnavailableError:  # no hardware JPEG engine on this GPU: nvJPEG's CUDA decoder instead
            return cls(target, limits, reduced_decode, DecoderOptions(device_id=device_id, backend="cuda"))

    def prepare_batch(self, encoded: Sequence[bytes], lap: Lap = no_lap) -> GpuPreparedBatch:
        """The batch; ``lap`` ends the phases triage, decode, cpu_path, letterbox and synchronize."""
        xp = self.parts.xp
        height, width = self.target
        routed = triage(encoded, self.limits)
        errors, reasons = dict(routed.errors), dict(routed.reasons)
        cpu_path = dict.fromkeys(routed.cpu, NOT_GPU_FORMAT)
        stream = self.parts.stream()
        lap("triage")

        gpu_items: list[tuple[int, DecodedImage, ImagePlan]] = []
        if routed.gpu:
            try:
                decoded = self.parts.decode([encoded[p] for p in routed.gpu], stream.ptr)
            except Exception:  # noqa: BLE001 -- a decoder failure must not fail images the CPU can decode
                decoded = [None] * len(routed.gpu)
                cpu_path.update(dict.fromkeys(routed.gpu, GPU_BATCH_ERROR))
            for position, result in zip(routed.gpu, decoded, strict=True):
                header = routed.headers[position]
                reason = accept_decoded(result, routed.upright[position])
                if result is None or reason is not None:
                    cpu_path.setdefault(position, reason or GPU_DECODE_FAILED)
                    continue
                factor = reduction_factor(header, self.target) if self.reduced_decode else 1
                gpu_items.append((position, result, plan_image(result.width, result.height, self.target, factor)))
        lap("decode")

        cpu_done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for position in sorted(cpu_path):
            try:
                image, source = decode_image(encoded[position], self.limits,
                                             self.target if self.reduced_decode else None)
            except ImageError as exc:
                errors[position], reasons[position] = str(exc), exc.reason
                continue
            canvas = np.empty((height, width, 3), dtype=np.uint8)
            cpu_done[position] = (canvas, letterbox_into(image, canvas, source).as_array())
        lap("cpu_path")

        slots = slot_order([p for p, _, _ in gpu_items], list(cpu_done))
        out = xp.empty((len(slots), height, width, 3), dtype=xp.uint8)
        params = np.empty((len(slots), PARAMS_LEN), dtype=np.float32)
        for position, _, plan in gpu_items:
            params[slots[position]] = plan.params
        self.parts.letterbox([image for _, image, _ in gpu_items], [plan for _, _, plan in gpu_items],
                             [slots[p] for p, _, _ in gpu_items], out)
        if cpu_done:
            order = sorted(cpu_done)
            for position in order:
                params[slots[position]] = cpu_done[position][1]
            host = np.stack([cpu_done[p][0] for p in order])
            out[xp.asarray(np.array([slots[p] for p in order], dtype=np.int64))] = xp.asarray(host)
        lap("letterbox")
        # The decoded images are freed when gpu_items goes; the kernel must be done with them by then.
        stream.synchronize()
        lap("synchronize")
        index = sorted(slots, key=slots.__getitem__)
        return GpuPreparedBatch(out, params, index, errors, cpu_path, reasons)


def batch_to_host(batch: GpuPreparedBatch, xp: Any = None) -> GpuPreparedBatch:
    """The batch with its images copied to host memory, once for all its requests (``--gpu-handoff host``).

    The Python backend then hands each request's images over as a host tensor (shared memory), where a device
    tensor costs the stub and the parent a transfer through Triton's CUDA pool per request on each side.
    """
    xp = xp if xp is not None else import_cupy()
    return replace(batch, images=xp.asnumpy(batch.images))


def to_float_nchw(images: Any, dtype: Any = np.float32, xp: Any = None) -> Any:
    """BGR uint8 NHWC -> RGB NCHW scaled to [0, 1] on the device, as the CPU ``to_float_nchw``."""
    xp = xp if xp is not None else import_cupy()
    rgb = images[..., ::-1].transpose(0, 3, 1, 2).astype(xp.float32)
    return xp.ascontiguousarray((rgb / xp.float32(255.0)).astype(dtype, copy=False))
