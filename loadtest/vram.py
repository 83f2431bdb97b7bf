"""GPU memory in use, through NVIDIA's NVML (``nvidia-ml-py``, imported only when asked): None, never 0, where there
is no NVML library or no GPU, so a CPU-only report says "absent" rather than "empty"."""

from __future__ import annotations

import logging
from collections.abc import Collection

logger = logging.getLogger(__name__)


def gpu_memory_used_mb(pids: Collection[int] | None = None) -> float | None:
    """MiB of GPU memory used by ``pids`` (summed over every GPU), or by everything on the GPUs when ``pids`` is None.

    None when ``nvidia-ml-py`` is not installed, no driver or GPU answers, or NVML cannot see per-process usage.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        logger.debug("no NVML: %s", exc)
        return None
    try:
        used = 0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            if pids is None:
                used += int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
                continue
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid in pids and process.usedGpuMemory is not None:
                    used += int(process.usedGpuMemory)
        return used / 2**20
    except pynvml.NVMLError as exc:
        logger.debug("NVML query failed: %s", exc)
        return None
    finally:
        pynvml.nvmlShutdown()
