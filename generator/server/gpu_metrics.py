"""Per-GPU Prometheus metrics read from NVML through ``nvidia-ml-py`` (module ``pynvml``), imported lazily.

Triton's own GPU metrics (``--allow-gpu-metrics``) need DCGM, which neither the lent H200 nor a plain GPU host has;
NVML comes with every driver. Exported beside the watchdog's metrics by ``generator serve`` (127.0.0.1:8003) and
by ``python -m generator.server.gpu_metrics --port P`` (the deployed GPU profile's exporter): standard library
only, like watchdog.py, so the file can be copied alone into an image.

Where NVML does not answer (no binding, no driver, no GPU) nothing is exported: the series are absent, never 0, so
dashboards show "no data" and alerts stay silent instead of reporting an idle GPU. A single reading NVML refuses
(power on a GPU without a sensor, say) leaves out that series only.

    gpu_info{gpu,uuid,name} 1                     gpu_utilization_ratio       0..1, the last sample period
    gpu_memory_used_bytes, gpu_memory_total_bytes gpu_memory_peak_bytes       highest sampled since the exporter started
    gpu_power_watts, gpu_power_limit_watts        gpu_energy_joules_total     NVML's energy counter (since driver load)
    gpu_temperature_celsius                       gpu_sm_clock_hertz
    gpu_throttled{reason="thermal"|"power"}       1 while NVML's clock event reasons say so
    gpu_process_memory_bytes{gpu,uuid,model}      GPU memory of each Triton model's processes (the Python stubs)
"""

from __future__ import annotations

import argparse
import http.server
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

# NVML clock event (throttle) reasons, nvml.h: nvmlClocksEventReason*.
SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x4, 0x8, 0x20, 0x40, 0x80
THROTTLE_REASONS = {"thermal": SW_THERMAL | HW_THERMAL, "power": SW_POWER_CAP | HW_POWER_BRAKE}
_GAUGES = {
    "utilization_ratio": "GPU busy share over NVML's last sample period (0..1)",
    "memory_used_bytes": "GPU memory in use",
    "memory_total_bytes": "GPU memory in all",
    "memory_peak_bytes": "Highest GPU memory in use sampled since the exporter started",
    "power_watts": "Power draw",
    "power_limit_watts": "Enforced power limit",
    "temperature_celsius": "GPU temperature",
    "sm_clock_hertz": "Streaming multiprocessor clock",
}


@dataclass
class GpuReading:
    """One GPU's readings; None where NVML refused that one."""

    index: int
    uuid: str
    name: str
    values: dict[str, float | None] = field(default_factory=dict)
    energy_joules: float | None = None
    reasons: int | None = None
    processes: dict[int, int] = field(default_factory=dict)  # pid -> bytes of GPU memory


def import_nvml() -> ModuleType | str:
    """The initialised ``pynvml`` module, or why there is none."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 -- pynvml.NVMLError and library load errors alike
        return f"NVML did not start: {exc}"
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuMonitor:
    """Reads every GPU NVML sees; ``render`` gives the Prometheus text (empty without NVML)."""

    def __init__(self, nvml: ModuleType | str | None = None) -> None:
        loaded = import_nvml() if nvml is None else nvml
        self.nvml: ModuleType | None = loaded if isinstance(loaded, ModuleType) else None
        self.unavailable = loaded if isinstance(loaded, str) else ""
        self._lock = threading.Lock()
        self._peaks: dict[str, float] = {}

    @property
    def available(self) -> bool:
        return self.nvml is not None

    def _try(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except Exception:  # noqa: BLE001 -- pynvml.NVMLError_NotSupported and friends: leave the series out
            return None

    def read(self) -> list[GpuReading]:
        nvml = self.nvml
        if nvml is None:
            return []
        readings = []
        for index in range(self._try(nvml.nvmlDeviceGetCount) or 0):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            reading = GpuReading(index, _text(self._try(nvml.nvmlDeviceGetUUID, handle) or f"GPU-{index}"),
                                 _text(self._try(nvml.nvmlDeviceGetName, handle) or "unknown"))
            self._read_values(nvml, handle, reading)
            readings.append(reading)
        self._track_peaks(readings)
        return readings

    def _read_values(self, nvml: Any, handle: Any, reading: GpuReading) -> None:
        utilization = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
        power = self._try(nvml.nvmlDeviceGetPowerUsage, handle)  # mW
        limit = self._try(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)  # mW
        energy = self._try(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)  # mJ
        clock = self._try(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)  # MHz
        reading.values = {
            "utilization_ratio": None if utilization is None else utilization.gpu / 100,
            "memory_used_bytes": None if memory is None else float(memory.used),
            "memory_total_bytes": None if memory is None else float(memory.total),
            "power_watts": None if power is None else power / 1000,
            "power_limit_watts": None if limit is None else limit / 1000,
            "temperature_celsius": self._try(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
            "sm_clock_hertz": None if clock is None else clock * 1e6,
        }
        reading.energy_joules = None if energy is None else energy / 1000
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        reading.reasons = None if reasons is None else self._try(reasons, handle)
        processes = self._try(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
        reading.processes = {int(p.pid): int(p.usedGpuMemory or 0) for p in processes}

    def _track_peaks(self, readings: Sequence[GpuReading]) -> None:
        with self._lock:
            for reading in readings:
                used = reading.values.get("memory_used_bytes")
                if used is not None:
                    self._peaks[reading.uuid] = max(used, self._peaks.get(reading.uuid, 0.0))
                if reading.uuid in self._peaks:
                    reading.values["memory_peak_bytes"] = self._peaks[reading.uuid]

    def energy_joules(self) -> float | None:
        """The energy counters of every GPU summed (None when any GPU does not report one)."""
        readings = self.read()
        if not readings or any(r.energy_joules is None for r in readings):
            return None
        return sum(r.energy_joules or 0.0 for r in readings)

    def render(self, model_of_pid: Callable[[], dict[int, str]] | None = None) -> str:
        """Prometheus text for every GPU; ``model_of_pid`` names the model each GPU process serves."""
        readings = self.read()
        if not readings:
            return ""
        models = model_of_pid() if model_of_pid else {}
        return "\n".join(render_readings(readings, models)) + "\n"


def _number(value: float) -> str:
    """Exact in Prometheus' text (``:g`` keeps six digits: 21474836480 bytes would read 2.14748e+10)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _series(name: str, help_text: str, kind: str, rows: list[str]) -> list[str]:
    return [f"# HELP gpu_{name} {help_text}", f"# TYPE gpu_{name} {kind}", *rows] if rows else []


def render_readings(readings: Sequence[GpuReading], models: dict[int, str]) -> list[str]:
    def labels(r: GpuReading) -> str:
        return f'gpu="{r.index}",uuid="{r.uuid}"'

    lines = _series("info", "The GPUs NVML sees", "gauge",
                    [f'gpu_info{{{labels(r)},name="{r.name}"}} 1' for r in readings])
    for key, help_text in _GAUGES.items():
        lines += _series(key, help_text, "gauge", [f"gpu_{key}{{{labels(r)}}} {_number(r.values[key] or 0)}"
                                                   for r in readings if r.values.get(key) is not None])
    lines += _series("energy_joules_total", "Energy used since the driver loaded (NVML's counter)", "counter",
                     [f"gpu_energy_joules_total{{{labels(r)}}} {_number(r.energy_joules or 0)}"
                      for r in readings if r.energy_joules is not None])
    lines += _series("throttled", "1 while NVML reports clocks held down for this reason (thermal, power)", "gauge",
                     [f'gpu_throttled{{{labels(r)},reason="{reason}"}} {int(bool(r.reasons & mask))}'
                      for r in readings if r.reasons is not None for reason, mask in THROTTLE_REASONS.items()])
    per_model: dict[tuple[str, str], int] = {}
    for r in readings:
        for pid, used in r.processes.items():
            slot = (labels(r), models.get(pid, "other"))
            per_model[slot] = per_model.get(slot, 0) + used
    lines += _series("process_memory_bytes", "GPU memory of the processes serving each model", "gauge",
                     [f'gpu_process_memory_bytes{{{gpu},model="{model}"}} {used}'
                      for (gpu, model), used in sorted(per_model.items())])
    return lines


def sample_in_background(monitor: GpuMonitor, interval_s: float = 1.0) -> threading.Event:
    """Read the GPUs every ``interval_s`` on a daemon thread (the memory peak between scrapes); set the event
    to stop."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval_s):
            monitor.read()

    threading.Thread(target=loop, name="gpu-metrics-sampler", daemon=True).start()
    return stop


def serve(monitor: GpuMonitor, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """``GET /metrics`` with the GPU series on a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = monitor.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="gpu-metrics", daemon=True).start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-GPU Prometheus metrics from NVML on GET /metrics")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--interval-s", type=float, default=1.0, help="seconds between samples (memory peak)")
    args = parser.parse_args(argv)
    monitor = GpuMonitor()
    if not monitor.available:
        print(f"no GPU metrics: {monitor.unavailable}; serving an empty /metrics", flush=True)
    sample_in_background(monitor, args.interval_s)
    serve(monitor, args.host, args.port)
    print(f"GPU metrics on http://{args.host}:{args.port}/metrics", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
