"""Pure geometry of the GPU letterbox: OpenCV-exact resize weights and a NumPy model of the kernel.

The GPU letterbox must write the tensor the CPU path writes. ``cv2.resize(INTER_LINEAR)`` on uint8 works
in fixed point: 11-bit weights rounded from float32 positions (half-pixel centres), an exact integer
horizontal pass, and a vertical pass whose SIMD body (``VResizeLinearVec_32s8u``: ``>> 4``, high half of a
16-bit product, ``(a + b + 2) >> 2``) rounds differently from its scalar tail (``(a + b + 2**21) >> 22``).
The tables here reproduce those weights bit for bit, and ``letterbox_reference`` runs the kernel's integer
arithmetic in NumPy, so this CPU-only machine can hold it to ``cv2.resize``; the device run holds the CUDA
kernel to this reference.

``factor`` > 1 stands in for the CPU path's reduced-resolution JPEG decode (libjpeg's 1/2, 1/4, 1/8 DCT
scaling), which nvImageCodec does not offer: the full-size decode is averaged over ``factor`` x ``factor``
blocks (edge pixels repeated, as a JPEG encoder pads its blocks) before the same resize, so the geometry and
the letterbox parameters are exactly the CPU path's and the pixels are close to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ._cpu import FILL_VALUE, Letterbox, letterbox_geometry

COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS
COEF_SCALE = 1 << COEF_BITS
# OpenCV's vertical pass has a SIMD body (16 uint8 lanes, then 8, for 128-bit intrinsics) and a scalar tail
# that rounds exactly. The opencv-python 4.11 x86_64 wheel rounds every element of a row the SIMD way
# (measured against cv2.resize: the tests hold it), which lanes of (1, 1) model.
SIMD_LANES = (1, 1)


@dataclass(frozen=True)
class AxisTaps:
    """Two source indices and two 11-bit weights for each output sample along one axis."""

    first: np.ndarray  # int32 [n]
    second: np.ndarray  # int32 [n], clamped to the image
    weight0: np.ndarray  # int16 [n]
    weight1: np.ndarray  # int16 [n]


def _round_to_short(values: np.ndarray) -> np.ndarray:
    # saturate_cast<short>(float): round half to even (cvRound), then clamp.
    return np.clip(np.rint(values), -32768, 32767).astype(np.int16)


@lru_cache(maxsize=256)
def axis_taps(source: int, size: int, horizontal: bool) -> AxisTaps:
    """OpenCV's ``resizeGeneric_`` tables for one axis (``source`` samples resized to ``size``).

    Horizontally a position left of the first or right of the last sample is clamped with its weight;
    vertically only the row index is clamped and the weights stay as computed, as OpenCV does.
    """
    if source < 1 or size < 1:
        raise ValueError(f"cannot resize {source} samples to {size}")
    scale = 1.0 / (size / source)  # OpenCV: scale_x = 1. / inv_scale_x, inv_scale_x = dsize / ssize
    positions = ((np.arange(size, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    first = np.floor(positions).astype(np.int64)
    fraction = (positions - first.astype(np.float32)).astype(np.float32)
    if horizontal:
        before, after = first < 0, first >= source - 1
        fraction[before | after] = 0.0
        first[before] = 0
        first[after] = source - 1
    weight0 = _round_to_short((np.float32(1.0) - fraction) * np.float32(COEF_SCALE))
    weight1 = _round_to_short(fraction * np.float32(COEF_SCALE))
    taps = AxisTaps(
        first=np.clip(first, 0, source - 1).astype(np.int32),
        second=np.clip(first + 1, 0, source - 1).astype(np.int32),
        weight0=weight0,
        weight1=weight1,
    )
    for array in (taps.first, taps.second, taps.weight0, taps.weight1):
        array.flags.writeable = False  # shared through the cache
    return taps


def simd_end(width: int, lanes: tuple[int, int] = SIMD_LANES) -> int:
    """Index of the first element of a row (``width`` = pixels x channels) in OpenCV's scalar tail."""
    wide, narrow = lanes
    x = (width // wide) * wide
    while x < width - narrow:
        x += narrow
    return x


def reduced_size(width: int, height: int, factor: int) -> tuple[int, int]:
    """Size of an image decoded at 1/``factor`` scale: libjpeg rounds up."""
    return -(-width // factor), -(-height // factor)


@dataclass(frozen=True)
class ImagePlan:
    """Where one decoded image goes in the network input, and the parameters the NMS step needs."""

    source_width: int  # the decoded, upright, full-resolution image
    source_height: int
    factor: int  # block average before the resize (1: none)
    width: int  # the image the resize starts from: the source reduced by ``factor``
    height: int
    resized_width: int
    resized_height: int
    left: int
    top: int
    letterbox: Letterbox

    @property
    def params(self) -> np.ndarray:
        return self.letterbox.as_array()


@lru_cache(maxsize=1024)  # camera streams repeat a few sizes
def plan_image(source_width: int, source_height: int, target: tuple[int, int], factor: int = 1) -> ImagePlan:
    """The CPU path's letterbox geometry for a ``source_width`` x ``source_height`` image, reduced by ``factor``.

    ``target`` is (height, width). The gains map source pixels to input pixels, as ``letterbox_into`` computes
    them when it is given the source size of a reduced decode.
    """
    if factor not in (1, 2, 4, 8):
        raise ValueError(f"reduction factor must be 1, 2, 4 or 8, not {factor}")
    width, height = reduced_size(source_width, source_height, factor)
    ratio, resized_w, resized_h, left, top = letterbox_geometry(height, width, target)
    letterbox = Letterbox.placed(ratio, left, top, (width, height), (source_width, source_height))
    return ImagePlan(source_width, source_height, factor, width, height, resized_w, resized_h, left, top, letterbox)


def reduce_blocks(image: np.ndarray, factor: int) -> np.ndarray:
    """Average ``factor`` x ``factor`` blocks of a uint8 H x W x C image, rounding half up; edges repeat."""
    if factor == 1:
        return image
    height, width = image.shape[:2]
    out_w, out_h = reduced_size(width, height, factor)
    rows = np.minimum(np.arange(out_h * factor), height - 1)
    cols = np.minimum(np.arange(out_w * factor), width - 1)
    padded = image[rows][:, cols].astype(np.int32)
    sums = padded.reshape(out_h, factor, out_w, factor, -1).sum(axis=(1, 3))
    area = factor * factor
    return ((sums + area // 2) // area).astype(np.uint8)


def resize_reference(image: np.ndarray, size: tuple[int, int], lanes: tuple[int, int] = SIMD_LANES) -> np.ndarray:
    """``cv2.resize(image, size, interpolation=INTER_LINEAR)`` for uint8 H x W x C, in the kernel's integer steps.

    ``size`` is (width, height), as for cv2.
    """
    height, width, channels = image.shape
    out_w, out_h = size
    xt, yt = axis_taps(width, out_w, True), axis_taps(height, out_h, False)
    pixels = image.astype(np.int32)
    # Horizontal pass, exact: 8-bit pixels times 11-bit weights.
    wx0, wx1 = xt.weight0.astype(np.int32)[:, None], xt.weight1.astype(np.int32)[:, None]
    rows = pixels[:, xt.first] * wx0 + pixels[:, xt.second] * wx1  # [H, out_w, C]
    top, bottom = rows[yt.first], rows[yt.second]  # [out_h, out_w, C]
    wy0, wy1 = yt.weight0.astype(np.int32)[:, None, None], yt.weight1.astype(np.int32)[:, None, None]
    # Vertical pass: the SIMD body for most of each row, the exact formula for its tail.
    simd = (((top >> 4) * wy0) >> 16) + (((bottom >> 4) * wy1) >> 16)
    simd = (simd + 2) >> 2
    exact = (top * wy0 + bottom * wy1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS)
    element = np.arange(out_w * channels).reshape(out_w, channels)
    out = np.where(element < simd_end(out_w * channels, lanes), simd, exact)
    return np.clip(out, 0, 255).astype(np.uint8)


def letterbox_reference(image: np.ndarray, plan: ImagePlan, target: tuple[int, int],
                        lanes: tuple[int, int] = SIMD_LANES) -> np.ndarray:
    """The GPU kernel's output for one full-resolution BGR image, computed in NumPy."""
    if image.shape[:2] != (plan.source_height, plan.source_width):
        raise ValueError(f"image is {image.shape[1]}x{image.shape[0]}, the plan expects "
                         f"{plan.source_width}x{plan.source_height}")
    reduced = reduce_blocks(image, plan.factor)
    out = np.full((target[0], target[1], image.shape[2]), FILL_VALUE, dtype=np.uint8)
    resized = resize_reference(reduced, (plan.resized_width, plan.resized_height), lanes)
    out[plan.top : plan.top + plan.resized_height, plan.left : plan.left + plan.resized_width] = resized
    return out
