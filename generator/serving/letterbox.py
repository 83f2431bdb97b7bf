"""Ultralytics-compatible letterbox and its inverse.

Ultralytics resizes with the aspect ratio kept, pads the remainder evenly with grey 114, and splits an
odd padding with ``round(d - 0.1)`` / ``round(d + 0.1)``. Boxes are mapped back with the same padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from .contract import LETTERBOX_FIELDS

FILL_VALUE = 114
# Layout of the per-image letterbox parameters passed from preprocess to NMS.
PARAMS_LEN = len(LETTERBOX_FIELDS)  # pad_x, pad_y, gain_x, gain_y, source_width, source_height


@dataclass(frozen=True)
class Letterbox:
    """How one source image was placed into the network input.

    ``gain_x``/``gain_y`` map *source* pixels to input pixels; they differ from the resize ratio when the
    image was decoded at reduced resolution, so boxes always come back in the original image's pixels.
    """

    pad_x: float
    pad_y: float
    gain_x: float
    gain_y: float
    source_width: int
    source_height: int

    @classmethod
    def placed(cls, ratio: float, left: int, top: int, decoded: tuple[int, int], source: tuple[int, int]
               ) -> Letterbox:
        """An image decoded at ``decoded`` = (w, h), resized by ``ratio`` and placed at (left, top); gains
        refer to the ``source`` = (w, h) pixels, which differ from the decoded ones after a reduced decode."""
        return cls(
            pad_x=float(left),
            pad_y=float(top),
            gain_x=ratio * decoded[0] / source[0],
            gain_y=ratio * decoded[1] / source[1],
            source_width=source[0],
            source_height=source[1],
        )

    def as_array(self) -> np.ndarray:
        return np.array(
            [self.pad_x, self.pad_y, self.gain_x, self.gain_y, self.source_width, self.source_height],
            dtype=np.float32,
        )


def letterbox_geometry(height: int, width: int, target: tuple[int, int]) -> tuple[float, int, int, int, int]:
    """Return (ratio, resized_w, resized_h, pad_left, pad_top) for an image of ``height`` x ``width``."""
    target_h, target_w = target
    ratio = min(target_h / height, target_w / width)
    # At least one pixel: a 1x6000 image would otherwise round to zero and make cv2.resize raise.
    resized_w, resized_h = max(1, round(width * ratio)), max(1, round(height * ratio))
    pad_w, pad_h = (target_w - resized_w) / 2, (target_h - resized_h) / 2
    return ratio, resized_w, resized_h, round(pad_w - 0.1), round(pad_h - 0.1)


def letterbox_into(
    image: np.ndarray,
    out: np.ndarray,
    source_size: tuple[int, int] | None = None,
) -> Letterbox:
    """Letterbox ``image`` (H x W x 3 uint8) into the preallocated ``out`` (h x w x 3 uint8).

    ``source_size`` is the (width, height) of the original image when ``image`` was decoded at reduced
    resolution; the returned gains then refer to the original pixels.
    """
    height, width = image.shape[:2]
    ratio, resized_w, resized_h, left, top = letterbox_geometry(height, width, (out.shape[0], out.shape[1]))
    out[...] = FILL_VALUE
    region = out[top : top + resized_h, left : left + resized_w]
    if (resized_w, resized_h) == (width, height):
        region[...] = image
    else:
        # cv2 cannot resize into a strided view, so copy the (small) result in.
        region[...] = cv2.resize(image, (resized_w, resized_h), interpolation=cv2.INTER_LINEAR)
    return Letterbox.placed(ratio, left, top, (width, height), source_size or (width, height))


def letterbox(image: np.ndarray, target: tuple[int, int]) -> tuple[np.ndarray, Letterbox]:
    """Letterbox ``image`` into a new ``target`` = (height, width) array."""
    out = np.empty((target[0], target[1], 3), dtype=np.uint8)
    return out, letterbox_into(image, out)


def boxes_to_source(boxes: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Map xyxy boxes from network-input pixels back to source pixels, clipped to the image.

    ``boxes`` is [..., 4]; ``params`` is the matching ``Letterbox.as_array()`` (broadcastable).
    """
    pad = params[..., 0:2]
    gain = params[..., 2:4]
    limit = params[..., 4:6]
    out = np.empty_like(boxes, dtype=np.float32)
    out[..., 0:2] = (boxes[..., 0:2] - pad) / gain
    out[..., 2:4] = (boxes[..., 2:4] - pad) / gain
    np.clip(out[..., 0:2], 0, limit, out=out[..., 0:2])
    np.clip(out[..., 2:4], 0, limit, out=out[..., 2:4])
    return out
