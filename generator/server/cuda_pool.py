"""Triton's CUDA memory pool, where a GPU preprocess's images wait for the detector.

Between two Python-backend steps on the GPU (the GPU preprocess, then the detector) every image is an intermediate
tensor that Triton allocates from this pool. When the pool is full, Triton core allocates it in pinned host memory
instead (``AllocatedMemory`` in core's ``memory.cc``, which logs once "Failed to allocate CUDA memory ... falling back
to pinned system memory"): each image then goes to the host and back between the steps, and a tensor outside the pool
reaches a stub through a CUDA IPC handle of its own (python_backend's ``GetInputTensor``). Triton's default pool is 64
MiB per GPU, 53 letterboxed 640x640 images, fewer than a busy server holds in flight: the H200 run of 2026-12-03
logged that fallback (docs/results/gpu/2026-12-03-h200-bound/logs). ``generator serve`` and the deploy stack both
give it ``DEFAULT_MIB`` when a Python step runs on the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from generator.server.environments import STUB_GPU, stub_environment_for
from generator.server.gpu_metrics import import_nvml

DEFAULT_MIB = 2048  # per GPU; 1,700 images of 640x640 (uint8), measured on the lent H100 (docs/PERFORMANCE.md)
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
