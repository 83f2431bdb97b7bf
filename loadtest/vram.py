"""GPU memory in use, read through the project's NVML monitor (``generator.server.gpu_metrics``): None, never 0,
where there is no NVML library or no GPU, so a CPU-only report says "absent" rather than "empty"."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from generator.server.gpu_metrics import GpuMonitor


def gpu_memory_used_mb(pids: Collection[int] | None = None, monitor: GpuMonitor | None = None) -> float | None:
    """MiB of GPU memory used by ``pids`` (summed over every GPU), or by everything on the GPUs when ``pids`` is None.

    None when ``nvidia-ml-py`` is not installed, no driver or GPU answers, or NVML cannot read the memory.
    """
    readings = (monitor or GpuMonitor()).read()
    if not readings:
        return None
    if pids is None:
        used = [reading.values.get("memory_used_bytes") for reading in readings]
        if any(value is None for value in used):
            return None
        return sum(value or 0.0 for value in used) / 2**20
    return sum(size for reading in readings for pid, size in reading.processes.items() if pid in pids) / 2**20


def jetson_board_memory() -> Any:
    """A started Jetson monitor (tegrastats) whose ``ram_used_bytes`` is the board's shared RAM, or None off a Jetson.

    On a Jetson CPU and GPU share the RAM and CUDA's allocations are not all in a process's RSS: the board's total is
    the GPU memory figure there (a whole-board reading: keep other work off it while sizing).
    """
    from generator.server.jetson_metrics import JetsonMonitor, JetsonUnavailable

    try:
        monitor = JetsonMonitor()
    except JetsonUnavailable:
        return None
    monitor.start()
    deadline = time.monotonic() + 3.0  # tegrastats prints its first line after one interval (1 s)
    while monitor.ram_used_bytes() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return monitor
