"""Helpers shared by tests of several parts (test modules import from here, never from each other)."""

from __future__ import annotations

import io
import tarfile
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx


def fix_batch(source: Path, destination: Path, batch: int) -> Path:
    """Write a copy of ``source`` whose batch axis is fixed, like a default (static) Ultralytics export."""
    model = onnx.load(str(source))
    for value in (*model.graph.input, *model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = batch
    onnx.save(model, str(destination))
    return destination


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    uuid: str
    used: int = 10 * 2**30
    total: int = 141 * 2**30
    util: int = 0
    power_mw: int | None = 79_200
    energy_mj: int = 5_000_000
    temperature: int = 36
    sm_mhz: int = 345
    reasons: int = 0x1  # idle
    processes: list[tuple[int, int]] = field(default_factory=list)


def fake_nvml(gpus: list[FakeGpu], init_fails: bool = False) -> types.ModuleType:
    """A ``pynvml`` whose readings come from ``gpus`` (mutable between reads), in NVML's units."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU = 1, 0  # type: ignore[attr-defined]

    def init() -> None:
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    def power(h: FakeGpu) -> int:
        if h.power_mw is None:
            raise NVMLError("Not Supported")
        return h.power_mw

    functions: dict[str, Any] = {
        "nvmlInit": init,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: gpus[i],
        "nvmlDeviceGetUUID": lambda h: h.uuid,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H200",
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=h.util, memory=0),
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(used=h.used, total=h.total, free=h.total - h.used),
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: h.energy_mj,
        "nvmlDeviceGetTemperature": lambda h, sensor: h.temperature,
        "nvmlDeviceGetClockInfo": lambda h, clock: h.sm_mhz,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: h.reasons,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=b)
                                                            for p, b in h.processes],
    }
    for name, function in functions.items():
        setattr(m, name, function)
    return m


def tar_bytes(files: dict[str, bytes]) -> bytes:
    """An uncompressed tar stream holding ``files`` (member name -> content)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class LoadTally:
    """What a steady load saw: answers counted, every failure kept as ``Type: message`` (threads share it)."""

    answered: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send_until(self, stop: threading.Event, detect: Callable[[bytes], object], images: Sequence[bytes]) -> None:
        """Send ``images`` in turn, back to back, until ``stop`` is set; no retries hide a failure."""
        sent = 0
        while not stop.is_set():
            try:
                detect(images[sent % len(images)])
                with self.lock:
                    self.answered += 1
            except Exception as exc:  # noqa: BLE001 -- every failure is the finding
                with self.lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
            sent += 1


class TalliedLoad:
    """A load whose threads record into ``self.tally``; its answers and failures read as plain attributes."""

    tally: LoadTally

    @property
    def answered(self) -> int:
        return self.tally.answered

    @property
    def errors(self) -> list[str]:
        return self.tally.errors
