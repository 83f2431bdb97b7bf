"""Triton's CUDA memory pool, where a GPU preprocess's images wait for the detector.

Between two Python-backend steps on the GPU (the GPU preprocess, then the detector) every image is an intermediate
tensor that Triton allocates from this pool. When the pool is full, Triton core allocates it in pinned host memory
instead (``AllocatedMemory`` in core's ``memory.cc``: "Failed to allocate CUDA memory ... falling back to pinned
system memory"), and the Python backend then cannot hand the preprocess's GPU output over: its stub logs "An error
occurred while trying to load GPU buffers in the Python backend stub: failed to copy data: invalid argument" for the
response and goes on (``Stub::LoadGPUBuffers`` only logs it), so the request still succeeds although its image was
never copied. Triton's default pool is 64 MiB per GPU, 53 letterboxed 640x640 images: measured on the lent H100
(docs/PERFORMANCE.md, "The CUDA memory pool"), yolo11n at 64-256 requests in flight logged that failure 1,527 and 1,798
times in two 20 s runs with 64 MiB and never with ``DEFAULT_MIB``. ``generator serve`` and the deploy stack both give
the pool ``DEFAULT_MIB`` when a Python step runs on the GPU; it holds what the default build's queues can hold (about
50 images between the steps, 2.4 MB each with the detector's copy) many times over, not what a build with a queue
budget of seconds at peak can (``--max-queue-ms``): raise ``--cuda-pool-mib`` with it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from generator.server.environments import STUB_GPU, stub_environment_for
from generator.server.gpu_metrics import import_nvml

DEFAULT_MIB = 2048  # per GPU: about 1,700 letterboxed 640x640 images
TRITON_DEFAULT_MIB = 64  # what Triton 2.51 takes without the flag


def visible_gpus() -> int:
    """The GPUs Triton will number 0..N-1: ``CUDA_VISIBLE_DEVICES`` when set, else NVML's count, else 1."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")])
    nvml = import_nvml()
    if isinstance(nvml, str):
        return 1  # no NVML here: GPU 0 only (a KIND_GPU step on a machine with none fails at load anyway)
    return int(nvml.nvmlDeviceGetCount())


def pool_args(mib: int, gpus: int) -> list[str]:
    """Triton's ``--cuda-memory-pool-byte-size`` for each of ``gpus`` GPUs; none for 0 MiB (Triton's default)."""
    if mib < 0:
        raise ValueError(f"the CUDA memory pool cannot be negative: {mib} MiB")
    size = mib * 1024 * 1024
    return [f"--cuda-memory-pool-byte-size={gpu}:{size}" for gpu in range(gpus)] if mib else []


def serve_pool_args(repositories: Sequence[Path], mib: int | None = None) -> list[str]:
    """The pool flags for serving ``repositories``: ``mib`` (default ``DEFAULT_MIB``) on every visible GPU when a
    Python step of them runs on the GPU, none otherwise (their tensors stay in host memory)."""
    if stub_environment_for(list(repositories)) is not STUB_GPU:
        return []
    return pool_args(DEFAULT_MIB if mib is None else mib, visible_gpus())
