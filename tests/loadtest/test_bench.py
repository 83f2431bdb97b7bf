"""``python -m loadtest bench`` end to end against the real embedded Triton (fixture ``triton_server``).

Every window is a second or two: this checks that the harness measures the real thing and reports it,
not the numbers themselves (those are in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.repository.files import sha256_file

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_bench_measures_raw_ensemble_stages_and_paired_rounds(triton_server, tmp_path):
    http_port = triton_server.http_url.rsplit(":", 1)[1]
    metrics_port = triton_server.metrics_url.rsplit(":", 1)[1]
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "bench", "--url", f"grpc://{triton_server.grpc_url}",
         "--http-port", http_port, "--metrics-port", metrics_port, "--repository", str(triton_server.repository),
         "--model", triton_server.model_name, "--protocols", "grpc,http", "--sizes", "640x480",
         "--concurrency", "1", "--duration", "1.5", "--raw-iterations", "3", "--raw-batches", "1,2",
         "--paired-rounds", "2", "--paired-window", "1", "--paired-concurrency", "2", "--paired-size", "640x480",
         "--crosscheck-concurrency", "0", "--label", "test", "--results-dir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (json_file,) = tmp_path.glob("*-test.json")
    text = json_file.read_text()
    results = json.loads(text)
    assert results["machine"]["usable_cores"] >= 1 and results["server"]["triton_version"]
    # Shared and committed results name the model by file name and sha256, never by a path of this machine.
    for path in (triton_server.repository, triton_server.onnx_path, ROOT, tmp_path):
        assert str(path.resolve()) not in text and str(path) not in text
    source = results["server"]["repository"]["source_onnx"]
    assert source == {"name": triton_server.onnx_path.name, "sha256": sha256_file(triton_server.onnx_path)}
    assert results["server"]["repository"]["matches_manifest"] is True  # the numbers describe the recorded build

    raw = results["raw_detector"]
    assert [b["batch"] for b in raw["batches"]] == [1, 2]
    assert all(b["p50_ms"] > 0 and b["images_per_s"] > 0 for b in raw["batches"])
    assert raw["instances"] >= 1
    # An FP32 build is timed against the exported source ONNX: the served graph's additions count as cost.
    assert raw["baseline"].startswith("exported source") and results["paired"]["detector"]["baseline"] == raw["baseline"]
    assert raw["onnx"] == source and results["paired"]["detector"]["onnx"] == source

    name = triton_server.model_name
    cells = results["ensemble"]
    assert {(c["protocol"], c["concurrency"]) for c in cells} == {("grpc", 1), ("http", 1)}
    for cell in cells:
        assert cell["point"]["requests"] > 0 and cell["point"]["failures"] == 0
        # Triton counted the cell's requests in every composing model.
        for step in ("", "_preprocess", "_detector", "_nms"):
            assert cell["stages"][name + step]["requests"] >= cell["point"]["requests"]

    paired = results["paired"]
    assert len(paired["rounds"]) == 2
    for row in paired["rounds"]:
        assert row["failures"] == 0
        # served: the default two sessions of every core; alone: one session of every core, spinning off
        assert set(row["raw"]) == {"served", "single", "per_core", "alone"}
        assert all(v["images_per_s"] > 0 for v in row["raw"].values())
        assert row["ensemble_rps"] > 0 and row["ensemble_p50_c1_ms"] > 0
        best = max(v["images_per_s"] for v in row["raw"].values())
        assert row["ratio_best_raw"] == pytest.approx(row["ensemble_rps"] / best, abs=0.001)
        # The ensemble's time in Triton includes the detector's compute, so what it adds is positive.
        assert row["added_in_triton_c1_ms"] > 0
        # The single-stream floor: the raw detector's p50 plus decoding the frame as the preprocess step does.
        assert row["decode_p50_ms"] > 0
        lone = row["raw"][row["lone_raw"]]
        assert row["lone_raw"] in ("single", "alone")  # the test build serves two instances: these run alone
        assert lone["p50_ms"] == min(row["raw"][name]["p50_ms"] for name in ("single", "alone"))
        floor = lone["p50_ms"] + row["decode_p50_ms"]
        assert row["c1_vs_raw_plus_decode"] == pytest.approx(row["ensemble_p50_c1_ms"] / floor, abs=0.001)
        assert row["rps_vs_raw_single"] == pytest.approx(row["ensemble_rps"] / lone["images_per_s"], abs=0.001)
        assert len(row["loadavg_1m"]) == 2
    assert paired["summary"]["ratio_same_topology"]["min"] <= paired["summary"]["ratio_same_topology"]["median"]

    report = (tmp_path / json_file.name.replace(".json", ".md")).read_text()
    for heading in ("## (a) Raw detector", "## (b) Ensemble", "## (c) Per-stage costs", "## (d) Paired rounds"):
        assert heading in report
