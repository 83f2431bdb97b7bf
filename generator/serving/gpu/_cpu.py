"""The CPU path this package must agree with, imported in one place (relative: the serving package is
copied into generated repositories).

Header checks, the reduction factor, the letterbox geometry and the fallback decode are the CPU path's own
functions, unchanged: the GPU path differs only in where pixels are decoded and resampled.
"""

from __future__ import annotations

from ..images import (
    DEFAULT_LIMITS,
    ImageError,
    ImageHeader,
    ImageLimits,
    check_header,
    decode_image,
    is_frame_marker,
    jpeg_segments,
    reduction_factor,
)
from ..letterbox import FILL_VALUE, PARAMS_LEN, Letterbox, letterbox_geometry, letterbox_into

__all__ = [
    "DEFAULT_LIMITS",
    "FILL_VALUE",
    "PARAMS_LEN",
    "ImageError",
    "ImageHeader",
    "ImageLimits",
    "Letterbox",
    "check_header",
    "decode_image",
    "is_frame_marker",
    "jpeg_segments",
    "letterbox_geometry",
    "letterbox_into",
    "reduction_factor",
]
