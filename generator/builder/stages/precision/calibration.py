"""Calibration data for INT8: a feeding reader, a content digest, and the on-disk range cache.

Calibration (running the float model over every image and collecting activation ranges) is the
slow part of an INT8 build; the ranges depend only on the model, the data and the calibration
method, so they are cached under a key made of exactly those and a rebuild skips the work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from generator.builder.stages.precision.errors import CalibrationError

logger = logging.getLogger(__name__)

CalibrationMethodName = Literal["minmax", "entropy", "percentile"]
CALIBRATION_METHODS: tuple[CalibrationMethodName, ...] = ("minmax", "entropy", "percentile")
CACHE_DIR_ENV = "TRITON_DETECTION_ENSEMBLE_CALIB_CACHE"

ProgressFn = Callable[[str], None]


def log_progress(message: str) -> None:
    """Default progress sink: the package logger (the CLI shows INFO records)."""
    logger.info("%s", message)


def default_cache_dir() -> Path:
    """``$TRITON_DETECTION_ENSEMBLE_CALIB_CACHE`` or ``$XDG_CACHE_HOME|~/.cache``/triton-detection-ensemble/calib."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "triton-detection-ensemble" / "calib"


def digest_batches(batches: Iterable[np.ndarray]) -> str:
    """sha256 over dtype, shape and bytes of every batch, in order."""
    digest = hashlib.sha256()
    for batch in batches:
        array = np.ascontiguousarray(batch)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def cache_key(model_bytes: bytes, data_digest: str, method: str, options: dict[str, object]) -> str:
    """sha256 of everything the activation ranges depend on."""
    digest = hashlib.sha256()
    digest.update(hashlib.sha256(model_bytes).digest())
    digest.update(data_digest.encode())
    digest.update(method.encode())
    digest.update(json.dumps(options, sort_keys=True).encode())
    return digest.hexdigest()


def split_to_model_batch(batches: Iterable[np.ndarray], model_batch: int | None) -> list[np.ndarray]:
    """Materialise the batches as float32 NCHW arrays the model accepts.

    A model with a fixed batch of 1 (e.g. a default Ultralytics export) gets one image at a time;
    a dynamic-batch model gets the caller's batches unchanged.
    """
    items: list[np.ndarray] = []
    for index, batch in enumerate(batches):
        array = np.asarray(batch)
        if array.ndim != 4:
            raise CalibrationError(
                f"calibration batch {index} has shape {array.shape}; expected N x C x H x W"
            )
        if array.dtype != np.float32:
            raise CalibrationError(
                f"calibration batch {index} is {array.dtype}; expected float32 (pixels / 255)"
            )
        if model_batch is None or array.shape[0] == model_batch:
            items.append(array)
        elif model_batch == 1:
            items.extend(array[i : i + 1] for i in range(array.shape[0]))
        else:
            raise CalibrationError(
                f"calibration batch {index} has {array.shape[0]} images but the model takes exactly {model_batch}"
            )
    if not items:
        raise CalibrationError("no calibration images: pass at least one preprocessed batch")
    return items


@dataclass
class BatchReader:
    """An onnxruntime ``CalibrationDataReader`` over materialised batches, with progress and timing.

    Supports ``__len__``/``set_range`` so the calibrator can work in strides and keep only a few
    batches' intermediate tensors in memory at a time.
    """

    input_name: str
    items: Sequence[np.ndarray]
    progress: ProgressFn | None = log_progress
    started: float | None = None
    finished: float | None = None
    _iterator: Iterator[int] = field(default_factory=lambda: iter(()))
    _fed: int = 0

    def __post_init__(self) -> None:
        self._iterator = iter(range(len(self.items)))

    def __len__(self) -> int:
        return len(self.items)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._iterator = iter(range(start_index, min(end_index, len(self.items))))

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.started is None:
            self.started = time.perf_counter()
        index = next(self._iterator, None)
        if index is None:
            self.finished = time.perf_counter()
            return None
        self._fed += 1
        if self.progress is not None and (
            self._fed == 1 or self._fed % 8 == 0 or self._fed == len(self.items)
        ):
            self.progress(f"calibration: batch {self._fed}/{len(self.items)}")
        return {self.input_name: self.items[index]}

    @property
    def seconds(self) -> float:
        """Wall time from the first request for data to the last (the calibration inference)."""
        if self.started is None or self.finished is None:
            return 0.0
        return self.finished - self.started


def stride_for(count: int, chunk: int = 8) -> int:
    """Largest divisor of ``count`` not above ``chunk`` (onnxruntime needs an exact division)."""
    for candidate in range(min(chunk, count), 0, -1):
        if count % candidate == 0:
            return candidate
    return 1
