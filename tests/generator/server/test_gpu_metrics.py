"""The GPU exporter against a fake ``pynvml`` (the NVML binding is the boundary: this machine has no GPU)."""

from __future__ import annotations

import sys
import urllib.request

import pytest

from generator.server.gpu_metrics import GpuMonitor, import_nvml, serve
from generator.server.ports import free_port
from generator.server.watchdog import WatchdogMetrics, serve_metrics
from loadtest.metrics import parse_prometheus
from tests.helpers import FakeGpu, fake_nvml


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse_prometheus(text)}


def test_without_the_binding_or_a_driver_every_series_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert "nvidia-ml-py is not installed" in str(import_nvml())
    assert GpuMonitor().render() == "" and not GpuMonitor().available
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([FakeGpu("GPU-a")], init_fails=True))
    monitor = GpuMonitor()
    assert monitor.unavailable == "NVML did not start: Driver Not Loaded"
    assert monitor.render() == "" and monitor.energy_joules() is None


def test_readings_in_prometheus_units_with_models_on_process_memory() -> None:
    gpu = FakeGpu("GPU-a", util=87, power_mw=612_500, energy_mj=7_250_000, temperature=61, sm_mhz=1980,
                  processes=[(100, 2 * 2**30), (201, 3 * 2**30), (202, 1 * 2**30), (999, 5)])
    monitor = GpuMonitor(fake_nvml([gpu]))
    got = values(monitor.render(lambda: {100: "tritonserver", 201: "yolo_detector", 202: "yolo_detector"}))
    g = (("gpu", "0"), ("uuid", "GPU-a"))
    assert got[("gpu_info", tuple(sorted((*g, ("name", "NVIDIA H200")))))] == 1
    assert got[("gpu_utilization_ratio", g)] == 0.87
    assert got[("gpu_memory_used_bytes", g)] == 10 * 2**30 and got[("gpu_memory_total_bytes", g)] == 141 * 2**30
    assert got[("gpu_power_watts", g)] == 612.5 and got[("gpu_power_limit_watts", g)] == 700
    assert got[("gpu_energy_joules_total", g)] == 7250
    assert got[("gpu_temperature_celsius", g)] == 61 and got[("gpu_sm_clock_hertz", g)] == 1.98e9
    assert got[("gpu_throttled", tuple(sorted((*g, ("reason", "thermal")))))] == 0
    assert got[("gpu_throttled", tuple(sorted((*g, ("reason", "power")))))] == 0
    assert got[("gpu_process_memory_bytes", tuple(sorted((*g, ("model", "yolo_detector")))))] == 4 * 2**30
    assert got[("gpu_process_memory_bytes", tuple(sorted((*g, ("model", "tritonserver")))))] == 2 * 2**30
    assert got[("gpu_process_memory_bytes", tuple(sorted((*g, ("model", "other")))))] == 5


def test_throttle_reasons_peak_memory_and_energy_move_with_the_gpu() -> None:
    gpu = FakeGpu("GPU-a")
    monitor = GpuMonitor(fake_nvml([gpu, FakeGpu("GPU-b", energy_mj=1_000)]))
    first = monitor.energy_joules()
    gpu.used, gpu.reasons, gpu.energy_mj = 120 * 2**30, 0x4 | 0x40, gpu.energy_mj + 3_500_000  # power cap, HW thermal
    monitor.read()
    gpu.used = 20 * 2**30
    got = values(monitor.render())
    g = (("gpu", "0"), ("uuid", "GPU-a"))
    assert got[("gpu_memory_used_bytes", g)] == 20 * 2**30 and got[("gpu_memory_peak_bytes", g)] == 120 * 2**30
    assert got[("gpu_throttled", tuple(sorted((*g, ("reason", "thermal")))))] == 1
    assert got[("gpu_throttled", tuple(sorted((*g, ("reason", "power")))))] == 1
    assert first is not None and monitor.energy_joules() == pytest.approx(first + 3500)


def test_a_reading_nvml_refuses_leaves_out_that_series_only() -> None:
    got = values(GpuMonitor(fake_nvml([FakeGpu("GPU-a", power_mw=None)])).render())
    names = {name for name, _ in got}
    assert "gpu_power_watts" not in names
    assert {"gpu_power_limit_watts", "gpu_memory_used_bytes", "gpu_temperature_celsius"} <= names


def test_served_by_the_watchdog_endpoint_and_alone() -> None:
    monitor = GpuMonitor(fake_nvml([FakeGpu("GPU-a", util=50)]))
    endpoint = serve_metrics(WatchdogMetrics(), "127.0.0.1", free_port(), monitor.render)
    alone = serve(monitor, "127.0.0.1", free_port())
    try:
        texts = []
        for server in (endpoint, alone):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5) as r:
                texts.append(r.read().decode())
        assert all('gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.5' in text for text in texts)
        assert "triton_watchdog_healthy" in texts[0] and "triton_watchdog" not in texts[1]
    finally:
        endpoint.shutdown()
        alone.shutdown()


def test_the_supervising_watchdog_labels_the_servers_gpu_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """``watchdog.py supervise --metrics-port``: the GPU series with the server process named (none without NVML)."""
    import subprocess

    from generator.server import watchdog

    child = subprocess.Popen(["sleep", "30"])
    try:
        supervisor = watchdog.Supervisor(lambda: child, "127.0.0.1:1", ["m"], watchdog.WatchPolicy())
        supervisor.child = child
        monkeypatch.setitem(sys.modules, "pynvml", None)
        assert watchdog.gpu_series(supervisor) is None
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([FakeGpu("GPU-a", processes=[(child.pid, 7 * 2**20)])]))
        series = watchdog.gpu_series(supervisor)
        assert series is not None
        got = values(series())
        assert got[("gpu_process_memory_bytes", (("gpu", "0"), ("model", "tritonserver"), ("uuid", "GPU-a")))] == 7 * 2**20
    finally:
        child.kill()
        child.wait()
