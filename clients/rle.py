"""COCO compressed RLE masks, as a segmentation ensemble returns them (``detection_masks``), back to arrays.

The format is pycocotools' (``rleFrString``); the server encodes with ``generator.serving.masks.encode_counts``.
"""

from __future__ import annotations

import numpy as np


def decode_counts(text: bytes) -> list[int]:
    """The run lengths of a COCO compressed RLE string (pycocotools ``rleFrString``)."""
    counts: list[int] = []
    position = 0
    while position < len(text):
        x, shift, more = 0, 0, True
        while more:
            c = text[position] - 48
            x |= (c & 0x1F) << (5 * shift)
            more = bool(c & 0x20)
            position += 1
            shift += 1
            if not more and c & 0x10:
                x |= -1 << (5 * shift)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def decode_mask(text: bytes, height: int, width: int) -> np.ndarray:
    """A [height, width] boolean mask from its COCO compressed RLE string."""
    counts = decode_counts(text)
    values = np.zeros(len(counts), dtype=bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    if flat.size != height * width:
        raise ValueError(f"the RLE covers {flat.size} pixels, not {height} x {width}")
    return flat.reshape((height, width), order="F")
