"""Helpers of the serving tests, also used by the builder's graph tests and the integration tests."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np

from generator.serving.nms import Detections


def encode(image: np.ndarray, ext: str, params: list[int] | None = None) -> bytes:
    ok, buf = cv2.imencode(ext, image, params or [])
    assert ok
    return buf.tobytes()


def gradient(height: int, width: int) -> np.ndarray:
    """A smooth BGR image: survives JPEG well and has no symmetry, so rotations are visible."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), np.full_like(x, 60)],
                    axis=-1).astype(np.uint8)


def progressive(height: int = 96, width: int = 128) -> bytes:
    return encode(gradient(height, width), ".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])


def scan_offsets(data: bytes) -> list[int]:
    """Start of every start-of-scan segment (cv2's encoder writes no FF DA anywhere else)."""
    return [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xDA]


def with_repeated_scan(data: bytes, copies: int) -> bytes:
    """Repeat the smallest scan before the end marker: libjpeg only warns and decodes every copy."""
    end = data.rindex(b"\xff\xd9")
    bounds = [*scan_offsets(data), end]
    smallest = min((data[a:b] for a, b in itertools.pairwise(bounds)), key=len)
    return data[:end] + smallest * copies + b"\xff\xd9"


def reduce_v8(raw: np.ndarray) -> np.ndarray:
    """numpy twin of the graph suffix: boxes, best score (NaN if any class score is), first arg-max."""
    scores = raw[:, 4:, :]
    best = scores.max(axis=1, keepdims=True)  # numpy's max propagates NaN
    classes = scores.argmax(axis=1)[:, None, :].astype(raw.dtype)
    return np.concatenate([raw[:, :4, :], best, classes], axis=1)


def assert_same_detections(got: Detections, expected: Detections) -> None:
    for field in ("num_detections", "boxes", "scores", "classes"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field), err_msg=field)


class DeviceArray:
    """A stand-in for a CuPy array: NumPy memory that announces itself through ``__cuda_array_interface__``."""

    def __init__(self, array: np.ndarray, device: int = 0) -> None:
        self.array = array
        self.device = SimpleNamespace(id=device)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        contiguous = self.array.flags.c_contiguous
        return {"shape": self.array.shape, "typestr": self.array.dtype.str, "version": 3,
                "data": (self.array.ctypes.data, False), "strides": None if contiguous else self.array.strides}

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: Any) -> DeviceArray:
        return DeviceArray(self.array[index], self.device.id)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    def copy(self) -> DeviceArray:
        return DeviceArray(self.array.copy(), device=-1)  # "the current device"
