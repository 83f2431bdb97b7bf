"""Facts about the machine a measurement ran on, so numbers can be compared across runs honestly."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    import psutil

    memory = psutil.virtual_memory()
    affinity: int | None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": affinity,
        "ram_gib": round(memory.total / 2**30, 1),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {
            name: _version(name)
            for name in ("onnxruntime", "numpy", "opencv-python-headless", "tritonclient", "locust", "grpcio")
        },
        "loadavg": [round(v, 2) for v in os.getloadavg()],
    }
