"""The memory budget of ``loadtest sizing``: sizes, breaches, the per-stream rate and the limit met first."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.errors import LoadTestError
from loadtest.memory_budget import (
    MIB,
    MemoryBudget,
    first_limit,
    memory_lines,
    memory_record,
    parse_size,
    per_stream_mb,
    streams_within,
)


def test_sizes_binary_decimal_and_refused() -> None:
    assert parse_size("4GiB", "--memory-budget") == 4 * 2**30 == parse_size("4g", "--memory-budget")
    assert parse_size("512MiB", "--x") == 512 * MIB and parse_size("4GB", "--x") == 4 * 10**9
    assert parse_size("1.5GiB", "--x") == int(1.5 * 2**30) and parse_size("1048576", "--x") == MIB
    for bad in ("lots", "4 parsecs", "-1GiB", "0MiB", ""):
        with pytest.raises(LoadTestError, match=r"--memory-budget .* is not a size"):
            parse_size(bad, "--memory-budget")


def test_a_level_over_either_budget_fails_and_names_it() -> None:
    budget = MemoryBudget(ram_bytes=1024 * MIB, vram_bytes=512 * MIB)
    assert budget.breaches({"rss_peak_mb": 900.0, "vram_peak_mb": None}) == []
    assert budget.breaches({"rss_peak_mb": 1100.0, "vram_peak_mb": 600.0}) == [
        "RAM peak 1100 MiB > budget 1024 MiB", "VRAM peak 600 MiB > budget 512 MiB"]


def level(n: int, rss: float, passed: bool = True, breaches: tuple[str, ...] = ()) -> dict:
    return {"streams": n, "rss_peak_mb": rss, "vram_peak_mb": None, "passed": passed, "breaches": list(breaches)}


def test_per_stream_rate_streams_within_and_the_limit_met_first() -> None:
    levels = [level(1, 1300.0), level(2, 1360.0), level(4, 1460.0, False, ("RAM peak 1460 MiB > budget 1400 MiB",))]
    assert per_stream_mb(levels, 1200.0, "rss_peak_mb") == 100.0  # the largest of 100, 80, 65
    assert per_stream_mb(levels, None, "rss_peak_mb") is None and per_stream_mb(levels, 0.0, "vram_peak_mb") is None
    assert streams_within(1400 * MIB, 1200.0, 100.0) == 2 and streams_within(None, 1200.0, 100.0) is None
    assert streams_within(1024 * MIB, 1200.0, 0.0) == 0 and streams_within(2048 * MIB, 1200.0, 0.0) is None
    assert first_limit(levels) == "memory"
    assert first_limit([level(1, 1.0), level(2, 1.0, False, ("p95 900 ms > 500 ms",))]) == "latency"
    assert first_limit([level(1, 1.0, False, ("p95 900 ms > 500 ms", "RAM peak 9 MiB > budget 8 MiB"))]) == "both"
    assert first_limit(levels[:2]) == "none within --max-streams"
    memory = memory_record(levels, {"rss_mb": 1200.0, "vram_mb": None}, MemoryBudget(ram_bytes=1400 * MIB))
    assert memory["rss_per_stream_mb"] == 100.0 and memory["streams_within_ram_budget"] == 2
    lines = memory_lines(memory)
    assert lines[0].startswith("memory per stream: RSS +100 MiB over 1200 MiB idle, VRAM absent")
    assert "RAM budget 1400 MiB: 2 streams" in lines[1] and lines[-1] == "limit met first: memory"


def test_on_a_jetson_the_gpu_memory_is_the_boards_shared_ram(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NVML here; a replayed tegrastats line (tests/fixtures/tegrastats) stands for the board's own tool."""
    import argparse
    import sys

    from loadtest.commands.sizing import _budget
    from loadtest.sizing import MemoryWatch

    line = (Path(__file__).parents[1] / "fixtures" / "tegrastats" / "orin-nano-jp6.txt").read_text().splitlines()[0]
    tool = tmp_path / "tegrastats"
    tool.write_text(f"#!/bin/sh\necho '{line}'\nexec sleep 5\n")
    tool.chmod(0o755)
    args = argparse.Namespace(memory_budget=None, vram_budget="4GiB")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("JETSON_TEGRASTATS", str(tmp_path / "absent"))
    with pytest.raises(LoadTestError, match="--vram-budget needs GPU memory counters"):
        _budget(args, None)
    monkeypatch.setenv("JETSON_TEGRASTATS", str(tool))
    assert _budget(args, None) == MemoryBudget(vram_bytes=4 * 2**30)
    watch = MemoryWatch(None)
    assert watch.now() == (None, 2364.0) and watch.vram_source == "jetson board RAM (tegrastats)"
