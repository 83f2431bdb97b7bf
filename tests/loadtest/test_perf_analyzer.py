"""perf_analyzer wiring: CSV/text parsing on real output, command line, and the missing-library message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from loadtest.errors import LoadTestError, ToolMissingError
from loadtest.perf_analyzer import (
    PerfAnalyzerRun,
    command,
    locate_binary,
    missing_libraries,
    parse_concurrency,
    parse_csv,
)

DATA = Path(__file__).parent / "data"


def test_parse_real_csv_and_request_counts():
    points, breakdown = parse_csv(DATA / "perf_analyzer.csv", (DATA / "perf_analyzer.log").read_text())
    assert [p.concurrency for p in points] == [1, 2]
    rows = [line.split(",") for line in (DATA / "perf_analyzer.csv").read_text().splitlines()[1:]]
    for point, row in zip(points, sorted(rows, key=lambda r: int(r[0])), strict=True):
        assert point.tool == "perf_analyzer"
        assert point.throughput_rps == pytest.approx(float(row[1]), abs=1e-3)
        assert point.p50_ms == pytest.approx(float(row[9]) / 1000, abs=0.01)
        assert point.p95_ms == pytest.approx(float(row[11]) / 1000, abs=0.01)
        assert point.requests == 6  # from the text output: the run used --request-count 6
        assert point.p50_ms is not None and point.p95_ms is not None and point.p99_ms is not None
        assert point.p50_ms <= point.p95_ms <= point.p99_ms
        # The average is the sum of perf_analyzer's stacked latency components.
        assert point.avg_ms == pytest.approx(sum(float(v) for v in row[2:9]) / 1000, abs=0.01)
    assert breakdown[2]["Server Compute Infer"] > breakdown[2]["Server Queue"]


def test_not_a_perf_analyzer_csv(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(LoadTestError, match="not a perf_analyzer"):
        parse_csv(tmp_path / "x.csv")


def test_concurrency_parsing():
    assert parse_concurrency("4") == (4, 4, 1)
    assert parse_concurrency("1:8") == (1, 8, 1)
    assert parse_concurrency("2:8:2") == (2, 8, 2)
    for bad in ("x", "1:2:3:4", "0:2"):
        with pytest.raises(LoadTestError):
            PerfAnalyzerRun("h:1", "grpc", "m", Path("i"), Path("o"), concurrency=parse_concurrency(bad))


def test_command_has_the_stability_and_input_settings(tmp_path):
    run = PerfAnalyzerRun("127.0.0.1:8001", "grpc", "yolo", tmp_path / "in.json", tmp_path / "out.csv",
                          concurrency=(1, 4, 1), measurement_interval_ms=3000, stability_percentage=15)
    argv = command(Path("/bin/perf_analyzer"), run)
    joined = " ".join(argv)
    for part in ("-m yolo", "-u 127.0.0.1:8001", "-i grpc", f"--input-data {tmp_path / 'in.json'}",
                 "--concurrency-range 1:4:1", "--measurement-interval 3000", "-s 15", "--percentile=95",
                 f"-f {tmp_path / 'out.csv'}"):
        assert part in joined
    assert "--request-count" not in joined
    fixed = command(Path("pa"), PerfAnalyzerRun("h:1", "http", "m", Path("i"), Path("o"), request_count=12))
    assert fixed[-2:] == ["--request-count", "12"]


def test_missing_binary_says_where_it_comes_from(tmp_path):
    with pytest.raises(ToolMissingError, match="not found"):
        locate_binary(tmp_path / "perf_analyzer")


def test_missing_cuda_runtime_is_named():
    try:
        binary = locate_binary()
    except ToolMissingError:
        pytest.skip("no perf_analyzer binary in this environment")
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    if "libcudart.so.12 " in cache:
        pytest.skip("a system-wide CUDA 12 runtime is installed here")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    missing = missing_libraries(binary, env)
    # Without the nvidia-cuda-runtime-cu12 lib folder on the path the loader cannot find libcudart.
    assert "libcudart.so.12" in missing
