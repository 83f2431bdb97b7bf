"""Locust users, ``loadtest run`` and perf_analyzer against the real embedded Triton (fixture ``triton_server``).

Loads are tiny and bounded (2 users, a few seconds, loopback only).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.errors import ToolMissingError
from loadtest.perf_analyzer import check_runnable, locate_binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _loadtest(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadtest", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False)


def _run(server, protocol: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    return _loadtest("run", "--url", url, "--protocol", protocol, "--model", server.model_name,
                     "--metrics-url", server.metrics_url, "--users", "2", "--spawn-rate", "2", "--duration", "5s",
                     "--sizes", "320x240,640x480", "--images-per-size", "1", "--out", str(out), *extra)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_run_writes_reports_with_real_numbers(triton_server, tmp_path, protocol):
    result = _run(triton_server, protocol, tmp_path, "--max-fail-ratio", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    client = summary["client"]
    assert client["requests"] > 0 and client["failures"] == 0
    assert 0 < client["p50_ms"] <= client["p95_ms"] <= client["max_ms"] + 10
    assert client["throughput_rps"] > 0
    # Bytes received: a padded detection response is at least the four output tensors (100 boxes).
    assert client["avg_response_bytes"] > 100 * 4 * 4
    assert summary["health"]["achieved_users"] == 2 and summary["health"]["valid"] in (True, False)
    # Triton saw the same requests: every composing model ran at least as many as Locust completed.
    triton = summary["triton"]
    name = triton_server.model_name
    assert triton[name]["requests"] >= client["requests"] - client["failures"]
    for step in ("preprocess", "detector", "nms"):
        stage = triton[f"{name}_{step}"]
        assert stage["requests"] >= triton[name]["requests"]
        assert stage["compute_infer_us"] > 0 and stage["avg_batch"] >= 1
    with (tmp_path / "locust_stats.csv").open(newline="") as handle:
        rows = {row["Name"]: row for row in csv.DictReader(handle)}
    assert rows[name]["Type"] == protocol and int(rows["Aggregated"]["Request Count"]) > 0
    history = (tmp_path / "locust_stats_history.csv").read_text().splitlines()
    assert len(history) >= 3
    assert "locust" in (tmp_path / "report.html").read_text().lower()
    assert (tmp_path / "latency.png").read_bytes()[:4] == b"\x89PNG"


def test_impossible_sla_fails_the_run(triton_server, tmp_path):
    result = _run(triton_server, "grpc", tmp_path, "--sla-p95-ms", "0.001")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "exceeds the SLA of 0.001 ms" in result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["thresholds"]["passed"] is False and summary["client"]["requests"] > 0


def test_bad_images_are_counted_as_failures(triton_server, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "broken.jpg").write_bytes(b"\xff\xd8 definitely not a jpeg")
    result = _run(triton_server, "http", tmp_path / "out", "--images", str(images), "--max-fail-ratio", "0.5")
    assert result.returncode == 2, result.stdout + result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["client"]["requests"] > 0 and summary["client"]["failures"] == summary["client"]["requests"]
    triton = summary["triton"]
    name = triton_server.model_name
    # Triton counts the failure on the ensemble (the preprocess step itself "succeeded" in returning an error
    # response), and nothing reached the detector.
    assert triton[name]["failures"] >= summary["client"]["failures"] * 0.8
    assert triton[f"{name}_detector"]["requests"] == 0


def test_distributed_master_with_a_local_worker(triton_server, tmp_path):
    result = _run(triton_server, "grpc", tmp_path, "--local-workers", "1", "--master-port", "19457")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"]["mode"] == "master" and summary["health"]["workers"] == 1
    assert summary["client"]["requests"] > 0


def test_perf_analyzer_with_real_images(triton_server, tmp_path):
    try:
        check_runnable(locate_binary())
    except ToolMissingError as exc:
        pytest.skip(str(exc))
    result = _loadtest("perf-analyzer", "--url", triton_server.grpc_url, "--model", triton_server.model_name,
                       "--metrics-url", triton_server.metrics_url, "--sizes", "640x480", "--images-per-size", "2",
                       "--concurrency", "1:2", "--request-count", "6", "--out", str(tmp_path),
                       "--admin-token", triton_server.admin_key)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [p["concurrency"] for p in summary["points"]] == [1, 2]
    assert all(p["requests"] == 6 and p["p50_ms"] > 0 for p in summary["points"])
    # Real images reached the ensemble and were decoded: the preprocess step succeeded on them.
    pre = summary["triton"][f"{triton_server.model_name}_preprocess"]
    assert pre["requests"] >= 12 and pre["failures"] == 0


def test_users_follow_the_published_route_to_the_canary(triton_server, tmp_path, monkeypatch):
    """A route (as `generator rollout` writes it) sends its share to the canary, reported under its own name; the
    two ensembles of the shared test server stand in for the stable and the canary version."""
    from clients.canary import Route, write_route

    route = tmp_path / "routing.json"
    write_route(route, Route(triton_server.model_name, triton_server.static_model_name, 50))
    monkeypatch.setenv("LOADTEST_ROUTE_FILE", str(route))
    result = _run(triton_server, "grpc", tmp_path, "--max-fail-ratio", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    with (tmp_path / "locust_stats.csv").open(newline="") as handle:
        rows = {row["Name"]: int(row["Request Count"]) for row in csv.DictReader(handle)}
    stable, canary = rows[triton_server.model_name], rows[triton_server.static_model_name]
    assert canary > 0 and abs(stable - canary) <= 2 * 2  # two users, each splitting its own requests evenly
