"""``loadtest sizing`` with a memory budget against the real embedded Triton (its defaults, the demo model): the
RSS of tritonserver and its stubs is measured per level, and a budget below the server's own footprint stops the
ramp at one stream with memory named as the limit met first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _sizing(triton_server, out: Path, label: str, *budget: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadtest", "sizing", "--url", triton_server.grpc_url,
                           "--model", triton_server.model_name, "--metrics-url", triton_server.metrics_url,
                           "--admin-token", triton_server.admin_key, "--fps", "5", "--p95-ms", "3000",
                           "--max-drop", "0.5", "--window", "4", "--warmup", "1", "--max-streams", "2",
                           "--sizes", "640x480", "--label", label, "--out", str(out), *budget],
                          capture_output=True, text=True, cwd=ROOT, timeout=240, check=False)


def test_memory_per_stream_and_a_budget_that_bounds_the_site(triton_server, tmp_path: Path) -> None:
    roomy = _sizing(triton_server, tmp_path, "roomy", "--memory-budget", "64GiB")
    assert roomy.returncode == 0, roomy.stdout + roomy.stderr
    record = json.loads(next(tmp_path.glob("*-roomy.json")).read_text())
    memory = record["memory"]
    assert memory["idle_rss_mb"] > 100, "tritonserver and its Python stubs, found by the gRPC port"
    for level in record["levels"]:
        assert level["rss_peak_mb"] >= memory["idle_rss_mb"] * 0.9, level["streams"]
    assert memory["rss_per_stream_mb"] is not None and memory["rss_per_stream_mb"] >= 0
    # A server already warmed by other tests keeps its old peak (RSS does not come back down): streams then add
    # nothing measurable, and the budget bounds nothing rather than a made-up number of streams.
    within = memory["streams_within_ram_budget"]
    if memory["rss_per_stream_mb"] == 0:
        assert within is None and "RAM budget 65536 MiB: no bound read" in roomy.stdout
    else:
        assert within > record["max_streams"]
    assert memory["first_limit"] != "memory"
    assert memory["vram_per_stream_mb"] is None, "no GPU here: absent, not zero"
    assert "memory per stream: RSS +" in roomy.stdout and "RAM budget 65536 MiB" in roomy.stdout

    tight = _sizing(triton_server, tmp_path, "tight", "--memory-budget", "64MiB")
    assert tight.returncode == 0, tight.stdout + tight.stderr
    record = json.loads(next(tmp_path.glob("*-tight.json")).read_text())
    assert record["measured_streams"] == 0 and [lv["streams"] for lv in record["levels"]] == [1]
    assert any(b.startswith("RAM peak") and b.endswith("> budget 64 MiB") for b in record["levels"][0]["breaches"])
    assert record["memory"]["first_limit"] == "memory" and "limit met first: memory" in tight.stdout


def test_budgets_without_their_counter_are_refused_in_one_line(tmp_path: Path) -> None:
    """No server listens on port 9 here: its RSS cannot be read, so the budget cannot be held (never a silent pass)."""
    for budget, expected in ((("--memory-budget", "4GiB"), "--memory-budget needs the server's processes"),
                             (("--vram-budget", "6GiB"), "--vram-budget needs GPU memory counters"),
                             (("--memory-budget", "lots"), "--memory-budget 'lots' is not a size")):
        result = subprocess.run([sys.executable, "-m", "loadtest", "sizing", "--url", "127.0.0.1:9", "--fps", "5",
                                 "--p95-ms", "100", "--out", str(tmp_path), *budget],
                                capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
        assert result.returncode == 1 and expected in result.stderr, result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
