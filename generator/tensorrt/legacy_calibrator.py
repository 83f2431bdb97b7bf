"""TensorRT 10's implicit INT8 calibrator, for ``legacy_precision_flags`` builds only.

Deprecated in TensorRT 10.1 and removed in 11; the supported INT8 path is Q/DQ in the ONNX
(:mod:`generator.precision.int8`). Device memory comes from the CUDA runtime through ctypes so
the legacy path needs no extra package.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from generator.tensorrt.errors import EngineBuildError

if TYPE_CHECKING:
    import tensorrt as trt

_CUDA_MEMCPY_HOST_TO_DEVICE = 1


def _cudart() -> ctypes.CDLL:
    for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise EngineBuildError(
        "legacy INT8 calibration needs the CUDA runtime (libcudart.so); it is not loadable"
    )


def make_entropy_calibrator(data_path: str, cache_path: str | None) -> trt.IInt8EntropyCalibrator2:
    """An ``IInt8EntropyCalibrator2`` over the stacked float32 NCHW batches in ``data_path`` (.npy)."""
    import tensorrt as trt

    batches = np.load(data_path, mmap_mode="r")
    if batches.ndim != 5 or batches.dtype != np.float32:
        raise EngineBuildError(f"{data_path} must hold float32 batches shaped [num_batches, N, C, H, W]")
    cudart = _cudart()

    class EntropyCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.index = 0
            self.device = ctypes.c_void_p()
            if cudart.cudaMalloc(ctypes.byref(self.device), ctypes.c_size_t(batches[0].nbytes)) != 0:
                raise EngineBuildError("cudaMalloc failed for the calibration batch")

        def get_batch_size(self) -> int:
            return int(batches.shape[1])

        def get_batch(self, names: list[str]) -> list[int]:
            if self.index >= batches.shape[0]:
                return []
            host = np.ascontiguousarray(batches[self.index])
            self.index += 1
            status = cudart.cudaMemcpy(
                self.device,
                host.ctypes.data_as(ctypes.c_void_p),
                ctypes.c_size_t(host.nbytes),
                _CUDA_MEMCPY_HOST_TO_DEVICE,
            )
            if status != 0:
                raise EngineBuildError(f"cudaMemcpy failed ({status}) for calibration batch {self.index}")
            return [int(self.device.value or 0)] * len(names)

        def read_calibration_cache(self) -> bytes:
            if cache_path is not None and Path(cache_path).is_file():
                return Path(cache_path).read_bytes()
            return b""

        def write_calibration_cache(self, cache: memoryview) -> None:
            if cache_path is not None:
                Path(cache_path).write_bytes(bytes(cache))

        def __del__(self) -> None:
            if self.device.value:
                cudart.cudaFree(self.device)

    return EntropyCalibrator()
