"""Energy per image from NVML's counter, over a fake ``pynvml`` (this machine has no GPU)."""

from __future__ import annotations

import sys

import pytest

from generator.server.gpu_metrics import GpuMonitor
from loadtest.bench_report import _cell_lines
from loadtest.energy import EnergyMeter, energy_record
from loadtest.report import LatencyPoint
from tests.generator.server.test_gpu_metrics import FakeGpu, fake_nvml


def test_joules_per_image_from_the_counters_of_every_gpu() -> None:
    a, b = FakeGpu("GPU-a", energy_mj=1_000_000), FakeGpu("GPU-b", energy_mj=2_000_000)
    meter = EnergyMeter(GpuMonitor(fake_nvml([a, b])))
    start = meter.read()
    a.energy_mj += 300_000  # 300 J and 100 J over a 2 s window of 500 images
    b.energy_mj += 100_000
    record = energy_record(start, meter.read(), images=500, seconds=2.0)
    assert record == {"joules": 400.0, "joules_per_image": 0.8, "mean_power_w": 200.0}


def test_nothing_is_reported_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    meter = EnergyMeter()
    assert not meter.available and "nvidia-ml-py" in meter.unavailable and meter.read() is None
    assert energy_record(None, None, 10, 1.0) is None


def test_the_report_lists_energy_per_cell_only_where_measured() -> None:
    point = LatencyPoint("bench", 8, 100, 0, 50.0, 10.0, 15.0, 20.0, 30.0, 12.0, "http 1280x720").to_dict()
    cell = {"point": point, "concurrency": 8, "stages": {}}
    assert "J per image" not in "\n".join(_cell_lines([cell]))
    lines = "\n".join(_cell_lines([{**cell, "gpu_energy": {"joules": 90.0, "joules_per_image": 0.9,
                                                            "mean_power_w": 45.0}}]))
    assert "| http 1280x720 c=8 | 0.9 | 45.0 |" in lines
