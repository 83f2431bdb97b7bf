"""Instance masks from a segmentation head: prototypes x coefficients, scaled back to the source image, cropped
to the box, run-length encoded.

The same steps as Ultralytics' predict with ``retina_masks`` (ultralytics 8.4.190, ``ops.process_mask_native``):
the mask logits at prototype resolution are upsampled by the smallest factor (1, 2 or 4) that puts the letterbox
padding on whole pixels, the padding is cut off, the rest resized bilinearly to the source size, thresholded at
0 and cropped to the detection's box in source pixels. Only the box's pixels are ever resized (a mask is zero
outside it), so the work and memory follow the boxes' area, not the source image's.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

# Masks upsampled together at prototype resolution (cv2 resizes up to 512 channels at once).
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


def _axis(out_size: int, in_size: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear resize along one axis, for output pixels ``start:stop`` only: the two source pixels of each and
    the second one's weight (half-pixel centres, clamped at the edges: cv2's INTER_LINEAR and torch's
    ``interpolate(mode="bilinear")``)."""
    position = np.maximum((np.arange(start, stop) + 0.5) * (in_size / out_size) - 0.5, 0.0)
    first = np.minimum(np.floor(position).astype(np.int64), in_size - 1)
    return first, np.minimum(first + 1, in_size - 1), (position - first).astype(np.float32)


def _window(plane: np.ndarray, source: tuple[int, int], box: tuple[int, int, int, int]) -> np.ndarray:
    """The pixels ``box`` = (x1, y1, x2, y2) of ``plane`` resized to ``source`` (h, w), without the rest."""
    x1, y1, x2, y2 = box
    y_first, y_second, y_weight = _axis(source[0], plane.shape[0], y1, y2)
    x_first, x_second, x_weight = _axis(source[1], plane.shape[1], x1, x2)
    rows = plane[y_first] * (1 - y_weight)[:, None] + plane[y_second] * y_weight[:, None]
    return rows[:, x_first] * (1 - x_weight) + rows[:, x_second] * x_weight


def box_windows(boxes: np.ndarray, source: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """The whole pixels each box covers (x1, y1, x2, y2): pixel (r, c) is in a box when x1 <= c < x2 and
    y1 <= r < y2 (Ultralytics' crop_mask)."""
    h, w = source
    lows = np.clip(np.ceil(boxes[:, :2]), 0, [w, h]).astype(np.int64)
    highs = np.clip(np.ceil(boxes[:, 2:4]), 0, [w, h]).astype(np.int64)
    return [(int(a), int(b), max(int(c), int(a)), max(int(d), int(b))) for (a, b), (c, d) in zip(lows, highs,
                                                                                                  strict=True)]


def source_masks(protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray,
                 source: tuple[int, int]) -> list[np.ndarray]:
    """Each detection's boolean mask in source pixels, inside its box window only (``box_windows``; zero
    outside). ``protos`` [nm, mh, mw], ``coefficients`` [n, nm], ``boxes`` [n, 4] xyxy in source pixels,
    ``source`` (h, w).
    """
    nm, mh, mw = protos.shape
    logits = (coefficients.astype(np.float32) @ protos.reshape(nm, -1).astype(np.float32)).reshape(-1, mh, mw)
    factor = _upsample_factor((mh, mw), source)
    top, bottom, left, right = _content((mh * factor, mw * factor), source)
    windows = box_windows(boxes, source)
    masks: list[np.ndarray] = []
    for start in range(0, len(logits), CHUNK):
        planes = np.ascontiguousarray(logits[start:start + CHUNK].transpose(1, 2, 0))  # HWC for cv2
        if factor > 1:
            planes = cv2.resize(planes, (mw * factor, mh * factor), interpolation=cv2.INTER_LINEAR)
        planes = planes.reshape(mh * factor, mw * factor, -1)[top:bottom, left:right]
        for channel in range(planes.shape[2]):
            masks.append(_window(planes[:, :, channel], source, windows[start + channel]) > 0)
    return masks


def run_lengths(mask: np.ndarray) -> np.ndarray:
    """COCO's run lengths of a [h, w] mask: column-major, alternating zeros and ones, zeros first (maybe 0)."""
    return window_run_lengths(mask, 0, 0, mask.shape)


def window_run_lengths(window: np.ndarray, top: int, left: int, size: tuple[int, int]) -> np.ndarray:
    """Run lengths of a ``size`` (h, w) mask that is zero outside ``window`` placed at (top, left).

    Only the window is read: a zero row above and below each of its columns makes every change of value fall
    inside a column, where its position in the whole mask is known.
    """
    h, w = size
    rows = window.shape[0]
    padded = np.zeros((rows + 2, window.shape[1]), dtype=np.int8)
    padded[1:-1] = window
    flat = padded.ravel(order="F")
    changes = np.flatnonzero(np.diff(flat)) + 1  # index of the first pixel after each change, in padded order
    column, row = np.divmod(changes, rows + 2)
    positions = (left + column) * h + (top + row - 1)
    # A run that ends at the bottom of a column and one that starts at the top of the next are one run in the
    # column-major order: their two changes fall on the same position and cancel.
    same = np.flatnonzero(positions[1:] == positions[:-1])
    positions = np.delete(positions, np.concatenate([same, same + 1]))
    positions = positions[positions < h * w]  # a run reaching the last pixel ends with the mask, not at a change
    return np.diff(np.concatenate([[0], positions, [h * w]]))


def encode_counts(counts: np.ndarray) -> bytes:
    """COCO's compressed RLE string (pycocotools ``rleToString``): each count less the one two before it, in
    5-bit groups, low first, 0x20 marking that more follow, offset by 48 into printable ASCII. Vectorised: every
    count's groups are computed at once and only the groups written are kept."""
    values = counts.astype(np.int64)
    deltas = values.copy()
    deltas[3:] -= values[1:-2]
    groups = 13  # 64 bits / 5
    shifted = deltas[:, None] >> (5 * np.arange(groups + 1))[None]  # [n, groups + 1]
    chunk = shifted[:, :groups] & 0x1F
    rest = shifted[:, 1:]
    more = np.where(chunk & 0x10, rest != -1, rest != 0)
    written = np.ones_like(more)
    written[:, 1:] = np.logical_and.accumulate(more[:, :-1], axis=1)
    chars = (chunk | np.where(more, 0x20, 0)) + 48
    return chars[written].astype(np.uint8).tobytes()
