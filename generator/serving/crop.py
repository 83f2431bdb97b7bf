"""The classifier's preprocess: resize the shorter side to the input size, then cut the centre square out.

What Ultralytics' classify predict does (``data/augment.py::classify_transforms`` on a PIL image, ultralytics
8.4.190): torchvision's ``Resize(size)`` on the shorter side (the longer one ``int(size * long / short)``, i.e.
truncated) with PIL's bilinear filter, which widens its support by the downscale factor (antialiased), then
``CenterCrop(size)`` at ``int(round((resized - size) / 2))``. The filter is PIL's ``ImagingResample`` done here in
numpy: the same coefficients in the same 22-bit fixed point, the horizontal pass rounded to 8 bits before the
vertical one, so the pixels equal Pillow's without Pillow in the serving environment. Only the output rows and
columns inside the crop are computed.
"""

from __future__ import annotations

import math

import numpy as np

from .letterbox import Letterbox

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images (libImaging/Resample.c)


def crop_geometry(height: int, width: int, size: int) -> tuple[int, int, int, int]:
    """Return (resized_w, resized_h, left, top) for an image of ``height`` x ``width`` and a square ``size``."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)  # torchvision's _compute_resized_output_size
    resized_w, resized_h = (size, new_long) if width <= height else (new_long, size)
    # torchvision's center_crop; Python's round() halves to even, as there.
    return resized_w, resized_h, round((resized_w - size) / 2.0), round((resized_h - size) / 2.0)


def bilinear_taps(in_size: int, out_size: int, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's fixed-point bilinear coefficients of output pixels ``first .. first + count``: the input index
    and the integer weight of each tap, both [count, taps] (a tap past the filter's end weighs 0)."""
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = filter_scale  # the bilinear (triangle) filter's support is 1, widened when downscaling
    center = (np.arange(first, first + count, dtype=np.float64) + 0.5) * scale
    # C's (int) truncates toward zero; a negative start is clamped to 0 right after, so the two agree.
    start = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    stop = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64)
    index = start[:, None] + np.arange(math.ceil(support) * 2 + 1)[None, :]
    valid = index < stop[:, None]
    weights = np.clip(1.0 - np.abs((index - center[:, None] + 0.5) / filter_scale), 0.0, None) * valid
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total != 0)
    fixed = np.trunc(0.5 + weights * (1 << PRECISION_BITS))  # the triangle's weights are never negative
    return np.minimum(index, in_size - 1), fixed


def _resample(pixels: np.ndarray, axis: int, in_size: int, out_size: int, first: int, count: int) -> np.ndarray:
    """One pass of Pillow's resample along ``axis`` (0: rows, 1: columns) of an H x W x C uint8 array, rounded to
    8 bits as its clip8 does.

    Tap by tap, so the scratch is one output-sized array whatever the downscale. int32 holds the sum exactly:
    the weights are never negative and add up to 2^22 (plus half a unit per tap), times 255 stays below 2^31.
    """
    index, fixed = bilinear_taps(in_size, out_size, first, count)
    weights = fixed.astype(np.int32)
    shape = [1, 1, 1]
    shape[axis] = count
    total = np.full((*pixels.shape[:axis], count, *pixels.shape[axis + 1:]), 1 << (PRECISION_BITS - 1),
                    dtype=np.int32)
    scratch = np.empty_like(total)
    for tap in range(index.shape[1]):
        np.multiply(np.take(pixels, index[:, tap], axis=axis), weights[:, tap].reshape(shape), out=scratch)
        total += scratch
    total >>= PRECISION_BITS
    return np.minimum(total, 255).astype(np.uint8)


def resize_crop(image: np.ndarray, size: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The ``size`` x ``size`` centre crop of ``image`` (H x W x C uint8) resized as Pillow's bilinear resize, and
    (resized_w, resized_h, left, top)."""
    height, width = image.shape[:2]
    resized_w, resized_h, left, top = crop_geometry(height, width, size)
    columns = min(size, resized_w - left)
    rows = min(size, resized_h - top)
    pixels = image
    if resized_w != width:  # Pillow skips a pass whose size does not change
        pixels = _resample(pixels, 1, width, resized_w, left, columns)
    else:
        pixels = pixels[:, left:left + columns]
    if resized_h != height:
        pixels = _resample(pixels, 0, height, resized_h, top, rows)
    else:
        pixels = pixels[top:top + rows]
    return pixels.astype(np.uint8, copy=False), (resized_w, resized_h, left, top)


def center_crop_into(image: np.ndarray, out: np.ndarray, source_size: tuple[int, int] | None = None) -> Letterbox:
    """Resize and centre-crop ``image`` into the preallocated square ``out`` (s x s x 3 uint8).

    The returned placement maps source pixels to input pixels like a letterbox's (the offset negative: the crop
    cuts into the resized image), so every step reads it the same way.
    """
    height, width = image.shape[:2]
    if out.shape[0] != out.shape[1]:
        raise ValueError(f"the centre crop makes a square input; this one is {out.shape[1]}x{out.shape[0]}")
    crop, (resized_w, resized_h, left, top) = resize_crop(image, out.shape[0])
    out[...] = 0  # torchvision pads a crop larger than the image with zeros; a resize to the size never needs it
    out[:crop.shape[0], :crop.shape[1]] = crop
    source = source_size or (width, height)
    return Letterbox(pad_x=float(-left), pad_y=float(-top), gain_x=resized_w / source[0],
                     gain_y=resized_h / source[1], source_width=source[0], source_height=source[1])
