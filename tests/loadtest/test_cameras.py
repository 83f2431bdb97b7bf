"""Camera load against the real embedded Triton: Locust camera users and ``loadtest sizing``.

Loads are tiny and bounded (two cameras or streams at 5 frames/s, seconds, loopback only).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.server.ports import free_port
from loadtest.sizing import predicted_streams
from tests.integration.rtsp import write_scene_video

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _loadtest(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadtest", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("mode", ["local", "distributed"])
def test_camera_users_report_drops_and_p95_per_camera(triton_server, tmp_path, mode):
    video = write_scene_video(tmp_path / "scenes.mp4", 10, seed=5, size=(640, 480))
    extra = ["--local-workers", "1", "--master-port", str(free_port())] if mode == "distributed" else []
    result = _loadtest("run", "--url", triton_server.grpc_url, "--model", triton_server.model_name,
                       "--metrics-url", triton_server.metrics_url, "--users", "2", "--spawn-rate", "2",
                       "--duration", "6s", "--camera-fps", "5", "--video", str(video), "--out", str(tmp_path / "out"),
                       *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    cameras = summary["cameras"]
    assert cameras["count"] == 2 and cameras["fps"] == 5.0
    for row in cameras["per_camera"]:
        assert row["frames"] == row["sent"] + row["dropped"], row
        assert row["frames"] >= 10, "6 s at 5 frames/s, less the users' start on a busy machine"
        assert row["failures"] == 0 and row["p95_ms"] is not None and row["p95_ms"] >= row["p50_ms"] > 0
    assert "2 cameras at 5 frames/s" in result.stdout
    with (tmp_path / "out" / "locust_stats.csv").open(newline="") as handle:
        names = {row["Name"] for row in csv.DictReader(handle)}
    assert {row["camera"] for row in cameras["per_camera"]} <= names, "Locust's table has a row per camera"


def test_sizing_ramps_streams_and_puts_the_formula_beside_the_measurement(triton_server, tmp_path):
    result = _loadtest("sizing", "--url", triton_server.grpc_url, "--model", triton_server.model_name,
                       "--metrics-url", triton_server.metrics_url, "--admin-token", triton_server.admin_key,
                       "--fps", "5", "--p95-ms", "3000", "--max-drop", "0.5", "--window", "4", "--warmup", "1",
                       "--max-streams", "2", "--sizes", "640x480", "--label", "test", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = tmp_path.glob("*-test.json")
    record = json.loads(report.read_text())
    levels = {level["streams"]: level for level in record["levels"]}
    assert set(levels) == {1, 2}
    assert all(level["answered"] > 0 and len(level["per_stream"]) == n for n, level in levels.items())
    assert record["measured_streams"] == max((n for n, lv in levels.items() if lv["passed"]), default=0)
    assert record["t_frame_ms"] == levels[1]["per_stream"][0]["mean_ms"] > 0 and record["t_inf_ms"] > 0
    assert record["alpha_ms"] == pytest.approx(record["t_frame_ms"] - record["t_inf_ms"], abs=0.02)
    assert record["predicted_streams"] == predicted_streams(record["t_frame_ms"], 5, record["utilisation"])
    assert record["memory"]["rss_peak_mb"] > 100, "the embedded server and its stubs, found by the gRPC port"
    assert record["memory"]["vram_peak_mb"] is None, "no GPU here: absent, not zero"
    assert Path(record["files"]["plot"]).read_bytes()[:4] == b"\x89PNG"
    assert "largest N within the limits" in result.stdout and "formula:" in result.stdout
