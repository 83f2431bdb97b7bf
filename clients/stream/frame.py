"""One frame on its way through a stream, and the one JPEG encoding it gets before it is sent."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clients.errors import ClientError

DEFAULT_JPEG_QUALITY = 90


@dataclass(frozen=True)
class Frame:
    """``index`` counts the stream's frames from 0, across reopenings; ``captured`` is the monotonic time of its
    decoding (latency is measured from it), ``wall`` the same moment as UNIX time; ``pts_s`` the source's own
    timestamp when it has one. ``image`` is BGR; a generated source hands ``jpeg`` bytes ready to send."""

    index: int
    captured: float
    wall: float
    pts_s: float | None
    image: np.ndarray | None = None
    jpeg: bytes | None = None


def encode_jpeg(image: np.ndarray, quality: int = DEFAULT_JPEG_QUALITY) -> bytes:
    """The bytes sent as the ensemble's ``IMAGE``: a BGR frame as baseline JPEG (OpenCV's libjpeg-turbo)."""
    import cv2

    if not 1 <= quality <= 100:
        raise ClientError(f"JPEG quality must be 1..100, got {quality}")
    ok, buffer = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ClientError(f"OpenCV could not encode a {image.shape} frame as JPEG")
    return bytes(buffer.tobytes())


def payload(frame: Frame, quality: int) -> bytes:
    """What goes on the wire for ``frame``: its JPEG, encoded here once unless the source brought one."""
    if frame.jpeg is not None:
        return frame.jpeg
    if frame.image is None:
        raise ClientError(f"frame {frame.index} carries neither an image nor JPEG bytes")
    return encode_jpeg(frame.image, quality)
