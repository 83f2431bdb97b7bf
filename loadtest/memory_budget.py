"""``loadtest sizing --memory-budget/--vram-budget``: size a site by whichever limit comes first, latency or memory.

An edge box (a Jetson, an 8 GiB ARM board) often runs out of memory before its GPU or CPU is busy: every stream
adds requests in flight, and their tensors, to the server's processes. Each level of the ramp records the peak RSS
of tritonserver and its Python-backend stubs (the process tree) and, where NVML answers, the GPU memory of those
processes; a level whose peak exceeds a budget fails like one over the p95. The report gives the idle footprint,
the memory each stream adds (the largest (peak - idle) / N over the levels: the conservative reading) and the
streams the budget allows at that rate, beside the latency's answer.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import LoadTestError

MIB = 2**20
_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": MIB, "mib": MIB, "g": 2**30, "gib": 2**30,
          "kb": 10**3, "mb": 10**6, "gb": 10**9}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.I)


def parse_size(text: str, option: str) -> int:
    """``4GiB``, ``512MiB``, ``4g`` (binary, as Docker reads it), ``4GB`` (decimal) or bytes; one-line error else."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise LoadTestError(f"{option} {text!r} is not a size: write e.g. 4GiB, 512MiB or 4GB")
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class MemoryBudget:
    """The site's limits on the server's memory; None: not limited."""

    ram_bytes: int | None = None
    vram_bytes: int | None = None

    def breaches(self, level: dict[str, Any]) -> list[str]:
        """Why a level's memory fails it (empty: within the budget)."""
        reasons = []
        for key, limit, what in (("rss_peak_mb", self.ram_bytes, "RAM"), ("vram_peak_mb", self.vram_bytes, "VRAM")):
            peak = level.get(key)
            if limit is not None and peak is not None and peak * MIB > limit:
                reasons.append(f"{what} peak {peak:.0f} MiB > budget {limit / MIB:.0f} MiB")
        return reasons

    def as_record(self) -> dict[str, float | None]:
        return {"ram_mb": None if self.ram_bytes is None else round(self.ram_bytes / MIB, 1),
                "vram_mb": None if self.vram_bytes is None else round(self.vram_bytes / MIB, 1)}


def per_stream_mb(levels: list[dict[str, Any]], idle_mb: float | None, key: str) -> float | None:
    """The memory one stream adds: the largest (peak - idle) / N over the measured levels; None where unmeasured."""
    rates = [(level[key] - idle_mb) / level["streams"] for level in levels
             if idle_mb is not None and level.get(key) is not None and level["streams"] > 0]
    return round(max(0.0, *rates), 1) if rates else None


def streams_within(budget_bytes: int | None, idle_mb: float | None, per_stream: float | None) -> int | None:
    """floor((budget - idle) / per stream): the streams the budget holds at the measured rate; 0 when the idle
    server alone exceeds it; None where unmeasured or where streams added no memory (no bound to read)."""
    if budget_bytes is None or idle_mb is None:
        return None
    if idle_mb * MIB > budget_bytes:
        return 0
    return None if not per_stream else math.floor((budget_bytes / MIB - idle_mb) / per_stream)


def first_limit(levels: list[dict[str, Any]]) -> str:
    """Which limit the ramp met first: the breaches of the smallest failing level ("latency", "memory", "both")."""
    failed = sorted((level for level in levels if not level.get("passed", True)), key=lambda lv: lv["streams"])
    if not failed:
        return "none within --max-streams"
    kinds = {"memory" if ("RAM peak" in b or "VRAM peak" in b) else "latency" for b in failed[0]["breaches"]}
    return "both" if len(kinds) == 2 else kinds.pop()


def memory_record(levels: list[dict[str, Any]], idle: dict[str, float | None],
                  budget: MemoryBudget | None) -> dict[str, Any]:
    """The report's memory section: idle footprint, per-stream rate, the budget's answer, the limit met first."""
    ram = per_stream_mb(levels, idle["rss_mb"], "rss_peak_mb")
    vram = per_stream_mb(levels, idle["vram_mb"], "vram_peak_mb")
    budget = budget or MemoryBudget()
    return {
        "idle_rss_mb": idle["rss_mb"], "idle_vram_mb": idle["vram_mb"],
        "rss_per_stream_mb": ram, "vram_per_stream_mb": vram,
        "budget": budget.as_record(),
        "streams_within_ram_budget": streams_within(budget.ram_bytes, idle["rss_mb"], ram),
        "streams_within_vram_budget": streams_within(budget.vram_bytes, idle["vram_mb"], vram),
        "first_limit": first_limit(levels),
    }


def memory_lines(memory: dict[str, Any]) -> list[str]:
    """The summary's memory lines: per stream, and against the budget where one was given."""
    def mib(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f} MiB"

    lines = [f"memory per stream: RSS +{mib(memory.get('rss_per_stream_mb'))} over {mib(memory.get('idle_rss_mb'))} "
             f"idle, VRAM " + ("absent (no NVML or no GPU)" if memory.get("idle_vram_mb") is None else
                               f"({memory.get('vram_source') or 'nvml'}) "
                               f"+{mib(memory.get('vram_per_stream_mb'))} over {mib(memory.get('idle_vram_mb'))} idle")]
    budget = memory.get("budget") or {}
    for what, key, within in (("RAM", "ram_mb", "streams_within_ram_budget"),
                              ("VRAM", "vram_mb", "streams_within_vram_budget")):
        if budget.get(key) is not None:
            held = memory.get(within)
            lines.append(f"{what} budget {budget[key]:.0f} MiB: " + ("no bound read (streams added no memory)"
                                                                   if held is None else f"{held} streams at the measured rate"))
    if budget.get("ram_mb") is not None or budget.get("vram_mb") is not None:
        lines.append(f"limit met first: {memory.get('first_limit')}")
    return lines
