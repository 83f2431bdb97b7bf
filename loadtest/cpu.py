"""Watch the load generator's own CPU, so a run that measured the client instead of the server is flagged."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CpuReport:
    per_process_avg: dict[int, float] = field(default_factory=dict)  # % of one core
    per_process_max: dict[int, float] = field(default_factory=dict)
    system_avg: float | None = None  # % of all cores
    samples: int = 0

    @property
    def busiest_avg(self) -> float | None:
        return max(self.per_process_avg.values()) if self.per_process_avg else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "generator_cpu_percent_avg_busiest_process": self.busiest_avg,
            "generator_cpu_percent_per_process_avg": {str(k): v for k, v in self.per_process_avg.items()},
            "generator_cpu_percent_per_process_max": {str(k): v for k, v in self.per_process_max.items()},
            "system_cpu_percent_avg": self.system_avg,
            "samples": self.samples,
        }


class CpuMonitor:
    """Sample psutil CPU percentages of some processes (and the whole machine) once per ``interval_s``.

    A Locust process runs its users on one core (gevent), so the per-process figure (100 = one core busy)
    is what says whether the generator saturated.
    """

    def __init__(self, pids: list[int], interval_s: float = 1.0) -> None:
        import psutil

        self._psutil = psutil
        self.interval_s = interval_s
        self._processes = {}
        for pid in pids:
            try:
                self._processes[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                continue
        self._values: dict[int, list[float]] = {pid: [] for pid in self._processes}
        self._system: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-monitor", daemon=True)

    def add(self, pid: int) -> None:
        try:
            self._processes[pid] = self._psutil.Process(pid)
            self._values[pid] = []
        except self._psutil.NoSuchProcess:
            pass

    def start(self) -> CpuMonitor:
        for process in list(self._processes.values()):
            with contextlib.suppress(self._psutil.Error):
                process.cpu_percent(None)  # the first call only sets the baseline
        self._psutil.cpu_percent(None)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            for pid, process in list(self._processes.items()):
                try:
                    self._values[pid].append(process.cpu_percent(None))
                except self._psutil.Error:
                    continue
            self._system.append(self._psutil.cpu_percent(None))

    def stop(self) -> CpuReport:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        # The first seconds are spent importing and building the corpus, not generating load: skip one sample.
        trimmed = {pid: values[1:] if len(values) > 2 else values for pid, values in self._values.items()}
        return CpuReport(
            per_process_avg={pid: round(sum(v) / len(v), 1) for pid, v in trimmed.items() if v},
            per_process_max={pid: round(max(v), 1) for pid, v in trimmed.items() if v},
            system_avg=round(sum(self._system) / len(self._system), 1) if self._system else None,
            samples=len(self._system),
        )
