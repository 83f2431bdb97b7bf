"""Jetson Prometheus metrics from the board's own counters: ``tegrastats`` lines and ``nvpmodel -q``.

Jetson has no NVML, so the GPU exporter (gpu_metrics.py) sees nothing there. ``tegrastats`` (JetPack's own tool,
mounted read-only from the host by the Jetson profile) prints one line per interval; this module parses it and
exports the same ``gpu_*`` names NVML's exporter uses where the meaning is the same, so the existing alert rules
apply unchanged, plus ``jetson_*`` series for what only a Jetson has:

    gpu_utilization_ratio{gpu="0",uuid="jetson"}   GR3D_FREQ busy share (0..1)
    gpu_memory_used_bytes / gpu_memory_total_bytes  the board's RAM, which CPU and GPU share
    gpu_temperature_celsius                          the GPU zone (``gpu@``/``GPU@``)
    gpu_power_watts                                  the board's input rail (VDD_IN / POM_5V_IN)
    gpu_power_limit_watts                            the power mode's budget, where its name says it ("15W")
    jetson_cpu_utilization_ratio{core}              each online core (offline cores absent)
    jetson_swap_used_bytes, jetson_emc_utilization_ratio
    jetson_temperature_celsius{zone}                 every zone tegrastats prints (cpu, soc0, tj, ...)
    jetson_rail_power_watts{rail}                    every power rail's current reading
    jetson_power_mode{mode}                          1, labelled with ``nvpmodel -q``'s mode name

Standard library only, like watchdog.py, so the file can be copied alone into an image. Where tegrastats is not
there (not a Jetson) nothing is exported and the reason is logged once: the series are absent, never 0.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%")
_TEMP = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)@(-?\d+(?:\.\d+)?)C\b")
# JetPack 5+: "VDD_IN 4380mW/4380mW" (current/average); JetPack 4: "POM_5V_IN 2389/2389".
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?=\s|$)")
_INPUT_RAILS = ("VDD_IN", "POM_5V_IN")
_MODE = re.compile(r"NV Power Mode:\s*(\S+)")
_MODE_WATTS = re.compile(r"^(\d+(?:\.\d+)?)W", re.I)


class JetsonUnavailable(RuntimeError):
    """No Jetson counters here; the message says which tool is missing."""


@dataclass
class TegraReading:
    """One tegrastats line; None/absent where the line does not carry the value."""

    ram_used_bytes: float | None = None
    ram_total_bytes: float | None = None
    swap_used_bytes: float | None = None
    cpu: dict[int, float] = field(default_factory=dict)  # core -> busy share, online cores only
    gpu_ratio: float | None = None
    emc_ratio: float | None = None
    temperatures: dict[str, float] = field(default_factory=dict)  # zone (lower case) -> Celsius
    rails_watts: dict[str, float] = field(default_factory=dict)  # rail -> current reading

    @property
    def input_watts(self) -> float | None:
        return next((self.rails_watts[r] for r in _INPUT_RAILS if r in self.rails_watts), None)


def parse_tegrastats(line: str) -> TegraReading:
    """Parse one tegrastats line (JetPack 4 to 7 forms); raises ValueError on a line that is not one."""
    ram = _RAM.search(line)
    if ram is None:
        raise ValueError(f"not a tegrastats line (no RAM field): {line[:80]!r}")
    reading = TegraReading(ram_used_bytes=int(ram.group(1)) * MIB, ram_total_bytes=int(ram.group(2)) * MIB)
    swap = _SWAP.search(line)
    reading.swap_used_bytes = None if swap is None else int(swap.group(1)) * MIB
    cpu = _CPU.search(line)
    for core, field_text in enumerate(cpu.group(1).split(",") if cpu else []):
        busy = re.match(r"\s*(\d+)%", field_text)
        if busy:  # "off": an offline core has no load to report
            reading.cpu[core] = int(busy.group(1)) / 100
    gr3d, emc = _GR3D.search(line), _EMC.search(line)
    reading.gpu_ratio = None if gr3d is None else int(gr3d.group(1)) / 100
    reading.emc_ratio = None if emc is None else int(emc.group(1)) / 100
    for zone, celsius in _TEMP.findall(line):
        # -256C: a sensor tegrastats lists but cannot read; PMIC: a fixed stand-in value (100C on a Nano), no sensor.
        if float(celsius) > -200 and zone.lower() != "pmic":
            reading.temperatures[zone.lower()] = float(celsius)
    for rail, current, _average in _RAIL.findall(line):
        if rail not in ("RAM", "SWAP"):
            reading.rails_watts[rail] = int(current) / 1000
    return reading


def parse_power_mode(text: str) -> str | None:
    """The mode name of ``nvpmodel -q`` ("NV Power Mode: 15W"), or None."""
    match = _MODE.search(text)
    return match.group(1) if match else None


def mode_budget_watts(mode: str | None) -> float | None:
    """The budget a mode's name states ("15W", "7W_AI"); None for names without one ("MAXN")."""
    match = _MODE_WATTS.match(mode or "")
    return float(match.group(1)) if match else None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _gauge(name: str, help_text: str, rows: Sequence[tuple[str, float]]) -> list[str]:
    if not rows:
        return []
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
            *(f"{name}{{{labels}}} {_number(value)}" for labels, value in rows)]


def render(reading: TegraReading, mode: str | None = None) -> str:
    """Prometheus text of one reading (and the power mode); the GPU is labelled like NVML's single GPU."""
    g = 'gpu="0",uuid="jetson"'
    gpu_temp = reading.temperatures.get("gpu")
    budget = mode_budget_watts(mode)
    lines = _gauge("gpu_utilization_ratio", "GPU busy share (tegrastats GR3D_FREQ)",
                   [(g, reading.gpu_ratio)] if reading.gpu_ratio is not None else [])
    lines += _gauge("gpu_memory_used_bytes", "RAM in use (shared by CPU and GPU on Jetson)",
                    [(g, reading.ram_used_bytes)] if reading.ram_used_bytes is not None else [])
    lines += _gauge("gpu_memory_total_bytes", "RAM in all (shared by CPU and GPU on Jetson)",
                    [(g, reading.ram_total_bytes)] if reading.ram_total_bytes is not None else [])
    lines += _gauge("gpu_temperature_celsius", "GPU zone temperature", [(g, gpu_temp)] if gpu_temp is not None else [])
    watts = reading.input_watts
    lines += _gauge("gpu_power_watts", "Board input power (VDD_IN)", [(g, watts)] if watts is not None else [])
    lines += _gauge("gpu_power_limit_watts", "The power mode's budget", [(g, budget)] if budget is not None else [])
    lines += _gauge("jetson_cpu_utilization_ratio", "CPU core busy share",
                    [(f'core="{c}"', v) for c, v in sorted(reading.cpu.items())])
    lines += _gauge("jetson_swap_used_bytes", "Swap in use",
                    [("", reading.swap_used_bytes)] if reading.swap_used_bytes is not None else [])
    lines += _gauge("jetson_emc_utilization_ratio", "External memory controller busy share",
                    [("", reading.emc_ratio)] if reading.emc_ratio is not None else [])
    lines += _gauge("jetson_temperature_celsius", "Thermal zone temperature",
                    [(f'zone="{z}"', v) for z, v in sorted(reading.temperatures.items())])
    lines += _gauge("jetson_rail_power_watts", "Power rail reading",
                    [(f'rail="{r}"', v) for r, v in sorted(reading.rails_watts.items())])
    lines += _gauge("jetson_power_mode", "The nvpmodel power mode in force", [(f'mode="{mode}"', 1)] if mode else [])
    return "\n".join(lines) + "\n" if lines else ""


def find_tool(env: str, default: str) -> str:
    """The host tool the Jetson profile mounts (``$env`` or ``default``, else on PATH); JetsonUnavailable."""
    name = Path(default).name
    for candidate in (os.environ.get(env, ""), default, shutil.which(name) or ""):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise JetsonUnavailable(f"{name} not found (not a Jetson, or not mounted: docs/EDGE.md)")


class JetsonMonitor:
    """Keeps the last line of a running ``tegrastats --interval MS``; ``render`` gives the Prometheus text."""

    def __init__(self, interval_ms: int = 1000) -> None:
        self._tegrastats = find_tool("JETSON_TEGRASTATS", "/usr/bin/tegrastats")
        self._interval_ms = interval_ms
        self._lock = threading.Lock()
        self._last: TegraReading | None = None
        self.mode = self._read_mode()

    def _read_mode(self) -> str | None:
        try:
            nvpmodel = find_tool("JETSON_NVPMODEL", "/usr/sbin/nvpmodel")
            out = subprocess.run([nvpmodel, "-q"], capture_output=True, text=True, timeout=10, check=False)
        except (JetsonUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            logger.info("no power mode: %s", exc)
            return None
        return parse_power_mode(out.stdout)

    def start(self) -> None:
        """Run tegrastats on a daemon thread for the life of the process."""
        threading.Thread(target=self._follow, name="tegrastats", daemon=True).start()

    def _follow(self) -> None:
        command = [self._tegrastats, "--interval", str(self._interval_ms)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as child:
            assert child.stdout is not None
            for line in child.stdout:
                try:
                    reading = parse_tegrastats(line)
                except ValueError as exc:
                    logger.warning("tegrastats: %s", exc)
                    continue
                with self._lock:
                    self._last = reading
        logger.warning("tegrastats exited with %s; the Jetson series stop", child.returncode)

    def render(self) -> str:
        with self._lock:
            return "" if self._last is None else render(self._last, self.mode)

    def ram_used_bytes(self) -> float | None:
        """The board's RAM in use at the last line (CPU and GPU allocations alike); None before the first."""
        with self._lock:
            return None if self._last is None else self._last.ram_used_bytes
