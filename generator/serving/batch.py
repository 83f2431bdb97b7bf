"""Batch preprocessing: many encoded images in, one letterboxed uint8 batch out.

Failures are per image: a bad image gets an error message and no slot in the batch, the rest go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .images import DEFAULT_LIMITS, ImageError, ImageLimits, decode_image
from .letterbox import PARAMS_LEN, Letterbox, letterbox_into
from .phases import Lap, no_lap

# Places one decoded image into its slot of the batch: (image, slot, source size) -> how it was placed.
Placement = Callable[[np.ndarray, np.ndarray, tuple[int, int]], Letterbox]


@dataclass(frozen=True)
class PreparedBatch:
    images: np.ndarray  # uint8 [M, H, W, 3], BGR, letterboxed
    letterbox: np.ndarray  # float32 [M, 6], see Letterbox.as_array
    index: list[int]  # position in the input of each of the M prepared images
    errors: dict[int, str]  # input position -> why it was rejected (the message for the client)
    reasons: dict[int, str] = field(default_factory=dict)  # input position -> ImageError.reason, for telemetry


def prepare_batch(
    encoded: Sequence[bytes],
    target: tuple[int, int],
    limits: ImageLimits = DEFAULT_LIMITS,
    reduced_decode: bool = True,
    place: Placement = letterbox_into,
    lap: Lap = no_lap,
) -> PreparedBatch:
    """Decode and letterbox every image into one contiguous batch.

    ``reduced_decode`` lets large JPEGs decode at 1/2, 1/4 or 1/8 resolution when that still covers the
    network input, which costs a fraction of a full decode. ``place`` puts an image into its slot: the letterbox,
    or a classifier's centre crop (``crop.center_crop_into``). ``lap`` ends the phases "decode" and "letterbox"
    of every image (``phases.PhaseClock``).
    """
    images = np.empty((len(encoded), target[0], target[1], 3), dtype=np.uint8)
    params = np.empty((len(encoded), PARAMS_LEN), dtype=np.float32)
    index: list[int] = []
    errors: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for position, data in enumerate(encoded):
        try:
            image, source = decode_image(data, limits, target if reduced_decode else None)
        except ImageError as exc:
            errors[position], reasons[position] = str(exc), exc.reason
            lap("decode")
            continue
        lap("decode")
        slot = len(index)
        params[slot] = place(image, images[slot], source).as_array()
        lap("letterbox")
        index.append(position)
    return PreparedBatch(images[: len(index)], params[: len(index)], index, errors, reasons)


def to_float_nchw(images: np.ndarray, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """BGR uint8 NHWC -> RGB NCHW scaled to [0, 1], as an Ultralytics export expects.

    This mirrors the normalisation prefix the generator adds to the served graph (see
    ``generator.builder.stages.graph.prefix``), and is used where the original, unwrapped model is run.
    """
    rgb = images[..., ::-1].transpose(0, 3, 1, 2).astype(np.float32)
    return (rgb / np.float32(255.0)).astype(dtype, copy=False)
