"""Instance masks from a segmentation head: prototypes x coefficients, scaled back to the source image, cropped
to the box, run-length encoded.

The same steps as Ultralytics' predict with ``retina_masks`` (ultralytics 8.4.190, ``ops.process_mask_native``):
the mask logits at prototype resolution are upsampled by the smallest factor (1, 2 or 4) that puts the letterbox
padding on whole pixels, the padding is cut off, the rest resized bilinearly to the source size, thresholded at
0 and cropped to the detection's box in source pixels. Masks are encoded as they are made, a few at a time, so a
batch never holds full-size masks of every detection at once.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

# Masks resized together (cv2 resizes up to 512 channels at once); bounds the full-size float scratch.
CHUNK = 16


def _upsample_factor(proto_size: tuple[int, int], source: tuple[int, int]) -> int:
    """Ultralytics' factor: the input is 4x the prototypes; its letterbox padding, in prototype pixels times f,
    must be whole."""
    (mh, mw), (h, w) = proto_size, source
    gain = min(4 * mh / h, 4 * mw / w)
    pad = (4 * mh - max(round(h * gain), 1)) | (4 * mw - max(round(w * gain), 1))
    return 4 // math.gcd(4, pad | pad // 2)


def _content(size: tuple[int, int], source: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the image inside letterboxed masks of ``size`` (Ultralytics' scale_masks)."""
    (im1_h, im1_w), (h, w) = size, source
    gain = min(im1_h / h, im1_w / w)
    new_h, new_w = max(round(h * gain), 1), max(round(w * gain), 1)
    top, left = round((im1_h - new_h) / 2 - 0.1), round((im1_w - new_w) / 2 - 0.1)
    return top, top + new_h, left, left + new_w


def source_masks(protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray,
                 source: tuple[int, int]) -> np.ndarray:
    """Boolean masks [n, h, w] in source pixels for ``n`` detections of one image.

    ``protos`` [nm, mh, mw], ``coefficients`` [n, nm], ``boxes`` [n, 4] xyxy in source pixels, ``source`` (h, w).
    """
    nm, mh, mw = protos.shape
    h, w = source
    logits = (coefficients.astype(np.float32) @ protos.reshape(nm, -1).astype(np.float32)).reshape(-1, mh, mw)
    factor = _upsample_factor((mh, mw), source)
    top, bottom, left, right = _content((mh * factor, mw * factor), source)
    masks = np.zeros((len(logits), h, w), dtype=bool)
    for start in range(0, len(logits), CHUNK):
        planes = np.ascontiguousarray(logits[start:start + CHUNK].transpose(1, 2, 0))  # HWC for cv2
        if factor > 1:
            planes = cv2.resize(planes, (mw * factor, mh * factor), interpolation=cv2.INTER_LINEAR)
        planes = planes.reshape(mh * factor, mw * factor, -1)[top:bottom, left:right]
        planes = cv2.resize(np.ascontiguousarray(planes), (w, h), interpolation=cv2.INTER_LINEAR).reshape(h, w, -1)
        masks[start:start + CHUNK] = planes.transpose(2, 0, 1) > 0
    columns, rows = np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)
    inside_x = (columns[None] >= boxes[:, 0:1]) & (columns[None] < boxes[:, 2:3])  # [n, w]
    inside_y = (rows[None] >= boxes[:, 1:2]) & (rows[None] < boxes[:, 3:4])  # [n, h]
    masks &= inside_y[:, :, None]
    masks &= inside_x[:, None, :]
    return masks


def run_lengths(mask: np.ndarray) -> np.ndarray:
    """COCO's run lengths of a [h, w] mask: column-major, alternating zeros and ones, zeros first (maybe 0)."""
    flat = mask.ravel(order="F").astype(np.int8)
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    counts = np.diff(bounds)
    return np.concatenate([[0], counts]) if flat.size and flat[0] else counts


def encode_counts(counts: np.ndarray) -> bytes:
    """COCO's compressed RLE string (pycocotools ``rleToString``): each count less the one two before it, in
    5-bit groups, low first, 0x20 marking that more follow, offset by 48 into printable ASCII."""
    out = bytearray()
    values = counts.astype(np.int64).tolist()
    for index, value in enumerate(values):
        x = value - values[index - 2] if index > 2 else value
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            out.append((c | 0x20 if more else c) + 48)
    return bytes(out)
