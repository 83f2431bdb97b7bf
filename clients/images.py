"""Accept images as encoded bytes or as file paths; the server does all decoding."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from clients.errors import ClientError, ImageSourceError

ImageInput = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]


def image_bytes(image: ImageInput) -> bytes:
    """Encoded bytes of `image`; paths are read here so a missing file fails before any request."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ImageSourceError(f"cannot read image {str(path)!r}: {exc.strerror or exc}") from None
    raise ClientError(f"an image must be bytes or a path, not {type(image).__name__}")
