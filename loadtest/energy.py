"""Energy per image from NVML's energy counter (generator/server/gpu_metrics.py), where NVML answers.

The counter of every GPU is read after a window's warm-up and at its end; the difference over the images answered
in between is the joules each image cost the GPUs (their whole draw, idle power included: what the operator
pays). Without NVML (no binding, no driver, no GPU) nothing is reported.
"""

from __future__ import annotations

import logging
from typing import Any

from generator.server.gpu_metrics import GpuMonitor

logger = logging.getLogger(__name__)


class EnergyMeter:
    """Reads the GPUs' energy counters; ``available`` is False (and ``unavailable`` says why) without NVML."""

    def __init__(self, monitor: GpuMonitor | None = None) -> None:
        self.monitor = monitor if monitor is not None else GpuMonitor()
        self.unavailable = self.monitor.unavailable

    @property
    def available(self) -> bool:
        return self.monitor.available

    def read(self) -> float | None:
        return self.monitor.energy_joules() if self.available else None


def energy_record(start_j: float | None, end_j: float | None, images: int, seconds: float) -> dict[str, Any] | None:
    """Joules, joules per image and mean power over a window; None where a counter was not read."""
    if start_j is None or end_j is None or seconds <= 0:
        return None
    joules = end_j - start_j
    return {"joules": round(joules, 3), "joules_per_image": round(joules / images, 4) if images else None,
            "mean_power_w": round(joules / seconds, 1)}
