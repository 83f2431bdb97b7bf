"""The sizing command's maths and parts, without a server."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from loadtest.errors import LoadTestError
from loadtest.sizing import GeneratedCamera, Limits, predicted_streams, process_tree, ramp
from loadtest.sizing_report import plot_sizing, summary_lines
from loadtest.vram import gpu_memory_used_mb
from tests.helpers import FakeGpu, fake_nvml


def test_the_formula():
    # 40 ms per frame at 5 frames/s: 5 streams fill the server; at U = 0.7, 3.5 -> 3
    assert predicted_streams(40.0, 5.0, 0.7) == 3
    assert predicted_streams(40.0, 5.0, 1.0) == 5
    assert predicted_streams(20.0, 25.0, 0.5) == 1
    with pytest.raises(LoadTestError):
        predicted_streams(0.0, 5.0, 0.7)


@pytest.mark.parametrize("capacity", [0, 1, 2, 3, 5, 7, 8, 13, 64])
def test_the_ramp_finds_the_largest_passing_level_and_measures_each_once(capacity):
    measured: list[int] = []

    def passes(n: int) -> bool:
        assert n not in measured, f"level {n} measured twice"
        measured.append(n)
        return n <= capacity

    assert ramp(passes, max_streams=64) == capacity
    assert len(measured) <= 2 * 7  # doubling to 64, then bisecting


def test_limits_let_the_worst_stream_decide():
    limits = Limits(fps=5, p95_ms=200, max_drop=0.01)
    good = {"answered": 50, "worst_p95_ms": 150.0, "worst_drop_rate": 0.0, "failed": 0}
    assert limits.breaches(good) == []
    assert limits.breaches({**good, "worst_p95_ms": 250.0}) == ["p95 250 ms > 200 ms"]
    assert limits.breaches({**good, "worst_drop_rate": 0.05}) == ["drop rate 5.0% > 1.0%"]
    assert limits.breaches({**good, "failed": 2}) == ["2 requests failed"]
    assert "no frame answered" in limits.breaches({**good, "answered": 0, "worst_p95_ms": None})


def test_generated_cameras_start_at_their_own_frame_and_carry_their_time():
    camera = GeneratedCamera([b"a", b"b", b"c"], fps=5, offset=1, phase_s=0.05)
    frames = list(itertools.islice(camera.frames(lambda: None), 4))
    assert [f.jpeg for f in frames] == [b"b", b"c", b"a", b"b"]
    assert [f.pts_s for f in frames] == pytest.approx([0.05, 0.25, 0.45, 0.65])


def test_the_server_memory_is_the_rss_of_its_process_tree():
    tree = process_tree(os.getpid())
    assert tree[os.getpid()] > 10 * 2**20
    assert process_tree(2**22 + 12345) == {}


def test_vram_is_absent_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as without nvidia-ml-py
    assert gpu_memory_used_mb() is None


def test_vram_counts_the_server_processes_through_nvml(monkeypatch):
    """NVML is the boundary: a stand-in with its API answers for two GPUs."""
    gpus = [FakeGpu("GPU-0", used=2**30, processes=[(10, 2 * 2**30), (99, 2**30)]),
            FakeGpu("GPU-1", used=2 * 2**30, processes=[(11, 2**29), (12, 0)])]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(gpus))
    assert gpu_memory_used_mb({10, 11, 12}) == 2048 + 512
    assert gpu_memory_used_mb() == 1024 + 2048
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(gpus, init_fails=True))
    assert gpu_memory_used_mb() is None


def _record() -> dict:
    levels = [{"streams": n, "worst_p95_ms": p95, "worst_drop_rate": drop}
              for n, p95, drop in ((1, 60.0, 0.0), (2, 90.0, 0.0), (4, 400.0, 0.2), (3, 150.0, 0.0))]
    return {"limits": {"fps": 5.0, "p95_ms": 200.0, "max_drop": 0.01}, "utilisation": 0.7, "measured_streams": 3,
            "predicted_streams": 2, "t_frame_ms": 55.0, "t_inf_ms": 30.0, "alpha_ms": 25.0,
            "memory": {"rss_peak_mb": 812.4, "vram_peak_mb": None}, "levels": sorted(levels, key=lambda x: x["streams"])}


def test_the_summary_says_measured_predicted_and_memory():
    lines = summary_lines(_record())
    assert lines[0].endswith(": 3 streams")
    assert "= 2 streams (t_frame 55.0 ms, the mean at one stream = t_inf 30.0 ms + alpha 25.0 ms, U 0.7)" in lines[1]
    assert lines[2] == "memory peak: server RSS 812 MiB, VRAM absent (no NVML or no GPU)"


def test_the_plot_is_written(tmp_path: Path):
    png = plot_sizing(_record(), tmp_path / "s.png", "demo")
    assert png.read_bytes()[:4] == b"\x89PNG"
