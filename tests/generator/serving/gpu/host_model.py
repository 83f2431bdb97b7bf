"""NumPy stand-ins for the device parts, so the GPU path's logic runs and is checked on a CPU-only machine.

``run_kernel_model`` is the CUDA kernel of ``generator.serving.gpu.letterbox`` transcribed line by line onto
the packed meta and tables (independently of ``geometry.letterbox_reference``); ``host_parts`` decodes with
OpenCV at full resolution, as nvImageCodec does, into row-padded buffers, as nvImageCodec may.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from generator.serving.gpu.batch import DeviceParts
from generator.serving.gpu.decode import DecodedImage
from generator.serving.gpu.geometry import SIMD_LANES, ImagePlan
from generator.serving.gpu.letterbox import META_FIELDS, pack_batch

ROW_PADDING = 40  # bytes added to each decoded row, to catch pitch mistakes
CHANNELS = np.arange(3)


def padded(image: np.ndarray) -> DecodedImage:
    """Copy an H x W x 3 image into a buffer with padded rows, described like a device image."""
    height, width = image.shape[:2]
    pitch = width * 3 + ROW_PADDING
    buffer = np.full((height, pitch), 77, dtype=np.uint8)
    buffer[:, : width * 3] = image.reshape(height, width * 3)
    return DecodedImage(buffer, 1, pitch, width, height)


def run_kernel_model(sources: Sequence[DecodedImage], meta: np.ndarray, tables: np.ndarray, out: np.ndarray,
                     fill: int = 114) -> None:
    out_h, out_w = out.shape[1:3]
    for m, source in enumerate(sources):
        g = dict(zip(META_FIELDS, (int(v) for v in meta[m]), strict=True))
        buffer: np.ndarray = source.handle
        rw, rh, f = g["resized_width"], g["resized_height"], g["factor"]
        sw, sh = g["source_width"], g["source_height"]
        xt = tables[g["x_offset"] : g["x_offset"] + 4 * rw].reshape(4, rw).astype(np.int64)
        yt = tables[g["y_offset"] : g["y_offset"] + 4 * rh].reshape(4, rh).astype(np.int64)
        def sample(rows: np.ndarray, cols: np.ndarray, f: int = f, sw: int = sw, sh: int = sh,
                   buffer: np.ndarray = buffer) -> np.ndarray:  # [rh, rw, 3]
            total = np.zeros((len(rows), len(cols), 3), dtype=np.int64)
            for i in range(f):
                y = np.minimum(rows * f + i, sh - 1)
                for j in range(f):
                    x = np.minimum(cols * f + j, sw - 1)
                    total += buffer[y[:, None, None], x[None, :, None] * 3 + CHANNELS]
            area = f * f
            return total if f == 1 else (total + area // 2) // area

        a0, a1 = xt[2][None, :, None], xt[3][None, :, None]
        b0, b1 = yt[2][:, None, None], yt[3][:, None, None]
        h0 = sample(yt[0], xt[0]) * a0 + sample(yt[0], xt[1]) * a1
        h1 = sample(yt[1], xt[0]) * a0 + sample(yt[1], xt[1]) * a1
        element = np.arange(rw)[None, :, None] * 3 + CHANNELS
        simd = ((((h0 >> 4) * b0) >> 16) + (((h1 >> 4) * b1) >> 16) + 2) >> 2
        exact = (h0 * b0 + h1 * b1 + (1 << 21)) >> 22
        value = np.clip(np.where(element < g["simd_end"], simd, exact), 0, 255).astype(np.uint8)
        slot = out[g["slot"]]
        slot[...] = fill
        slot[g["top"] : g["top"] + rh, g["left"] : g["left"] + rw] = value
    assert out_h > 0 and out_w > 0


@dataclass
class HostStream:
    ptr: int = 0
    synchronized: int = 0

    def synchronize(self) -> None:
        self.synchronized += 1


def host_parts(refuse: Sequence[bytes] = (), ignore_exif: bool = False,
               lanes: tuple[int, int] = SIMD_LANES) -> DeviceParts:
    """Device parts on the host: OpenCV full-resolution decode, the kernel model, NumPy arrays.

    ``refuse`` lists encoded images the fake decoder fails (as nvImageCodec returns ``None``);
    ``ignore_exif`` decodes without EXIF orientation (a decoder that ignores it).
    """
    stream = HostStream()
    flags = cv2.IMREAD_COLOR | (cv2.IMREAD_IGNORE_ORIENTATION if ignore_exif else 0)

    def decode(encoded: Sequence[bytes], stream_ptr: int) -> list[DecodedImage | None]:
        out: list[DecodedImage | None] = []
        for data in encoded:
            image = None if data in refuse else cv2.imdecode(np.frombuffer(data, np.uint8), flags)
            out.append(None if image is None else padded(image))
        return out

    def letterbox(sources: Sequence[DecodedImage], plans: Sequence[ImagePlan], slots: Sequence[int],
                  out: np.ndarray) -> None:
        if sources:
            meta, tables = pack_batch(plans, slots, lanes)
            run_kernel_model(sources, meta, tables, out)

    return DeviceParts(decode, letterbox, np, lambda: stream)
