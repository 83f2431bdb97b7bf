"""Locust command construction and run configuration (no load generated here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.errors import LoadTestError
from loadtest.locust_run import LOCUSTFILE, LocustRun, locust_command, parse_duration
from loadtest.plot import plot_history, read_history

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(("text", "seconds"), [("60", 60), ("45s", 45), ("2m", 120), ("1m30s", 90), ("1h", 3600)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "0s", "1x"])
def test_bad_durations(text):
    with pytest.raises(LoadTestError):
        parse_duration(text)


def _run(tmp_path: Path, **overrides) -> LocustRun:
    base = dict(url="127.0.0.1:8001", protocol="grpc", model="yolo", users=3, spawn_rate=3, duration_s=20,
                out=tmp_path)
    return LocustRun(**{**base, **overrides})


def test_local_command(tmp_path):
    argv = locust_command(_run(tmp_path, sla_p95_ms=250.0, protocol="http", url="127.0.0.1:8000"), "local")
    assert argv[argv.index("-f") + 1] == str(LOCUSTFILE) and "HttpDetectionUser" in argv
    joined = " ".join(argv)
    for part in ("--headless", "--users 3", "--run-time 20s", f"--csv {tmp_path / 'locust'}", "--csv-full-history",
                 f"--html {tmp_path / 'report.html'}", "--triton-sla-p95-ms 250.0", "--host 127.0.0.1:8000"):
        assert part in joined
    assert "--master" not in argv and "--worker" not in argv


def test_distributed_commands(tmp_path):
    run = _run(tmp_path, role="master", expect_workers=2, master_port=5600)
    master = " ".join(locust_command(run, "master"))
    assert "--master --expect-workers 2" in master and "--master-bind-port 5600" in master
    worker = locust_command(_run(tmp_path, master_host="10.0.0.5", master_port=5600), "worker")
    assert worker[-5:] == ["--worker", "--master-host", "10.0.0.5", "--master-port", "5600"]
    assert "--headless" not in worker and "--csv" not in worker  # workers report to the master only


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"protocol": "udp"}, "unknown protocol"),
        ({"users": 0}, "--users"),
        ({"role": "master"}, "--expect-workers"),
        ({"sizes": "huge"}, "bad image size"),
        ({"url": "http://h:1"}, "says http"),
    ],
)
def test_invalid_runs_are_rejected_up_front(tmp_path, overrides, message):
    with pytest.raises(LoadTestError, match=message):
        _run(tmp_path, **overrides)


def test_plot_from_a_real_history(tmp_path):
    data = read_history(DATA / "locust_stats_history.csv")
    assert data["t"][0] == 0 and len(data["t"]) >= 5
    assert max(v for v in data["rps"] if v is not None) > 0
    png = plot_history(DATA / "locust_stats_history.csv", tmp_path / "p.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
