"""``loadtest versus``: paired rounds of the served side against in-process references, their ratios and goals."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from generator.demo import DEMO_ONNX
from loadtest.images import synthetic_images
from loadtest.reference import (
    InProcessPipeline,
    Thresholds,
    ultralytics_missing,
)
from loadtest.ultralytics_procs import session_threads
from loadtest.versus import (
    DETECTOR,
    REFERENCE,
    SERVED,
    VARIANT,
    Side,
    VersusSettings,
    goals,
    goals_35,
    process_cpu_s,
    run_rounds,
)
from loadtest.versus_report import report_lines, write_plot

ROOT = Path(__file__).resolve().parents[2]


def sleeper(ms: float, lock: bool = False):
    """A side that takes ``ms`` per frame; ``lock``: one frame at a time across threads (no parallelism)."""
    import threading

    gate = threading.Lock()

    def infer(_: bytes) -> None:
        if lock:
            with gate:
                time.sleep(ms / 1000)
        else:
            time.sleep(ms / 1000)

    return lambda: (lambda: infer)


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    # Served: 10 ms a frame, streams in parallel; reference: 10 ms a frame, one at a time.
    sides = [Side(SERVED, sleeper(10), process_cpu_s), Side(REFERENCE, sleeper(10, lock=True), process_cpu_s)]
    return run_rounds(sides, [b"x"], VersusSettings(streams=(1, 4), rounds=2, window_s=0.3))


def test_rounds_alternate_and_ratios_are_taken_within_each(result: dict[str, Any]) -> None:
    rounds = result["rounds"]
    assert [r["order"] for r in rounds] == [[SERVED, REFERENCE], [REFERENCE, SERVED]]
    for r in rounds:
        ratios = r["ratios"][REFERENCE]
        assert ratios["p50_1"] == pytest.approx(r[SERVED]["1"]["p50_ms"] / r[REFERENCE]["1"]["p50_ms"], abs=1e-3)
        assert ratios["rps_4"] == pytest.approx(r[SERVED]["4"]["rps"] / r[REFERENCE]["4"]["rps"], abs=1e-3)
    summary = result["summary"]
    assert 0.8 < summary["ratios"][REFERENCE]["p50_1"]["median"] < 1.25  # the same 10 ms at one stream
    assert summary["ratios"][REFERENCE]["rps_4"]["median"] > 2.5  # four parallel streams against one at a time
    assert summary["goals"]["streams_4"]["met"] is True
    # Sleeping costs next to no CPU: the accounting counts work, not waiting.
    assert 0 <= summary["sides"][SERVED]["4"]["cpu_ms_per_image"]["median"] < 5


def test_goals_are_the_issues_thresholds() -> None:
    spread = lambda v: {"median": v, "min": v, "max": v}  # noqa: E731
    assert goals({"p50_1": spread(1.05)})["single_stream_p50"]["met"] is True
    assert goals({"p50_1": spread(1.06)})["single_stream_p50"]["met"] is False
    met = goals({"rps_4": spread(1.3), "p95_4": spread(1.0)})["streams_4"]
    assert met["met"] is True
    assert goals({"rps_4": spread(1.5), "p95_4": spread(1.01)})["streams_4"]["met"] is False


def test_report_and_plot_for_one_machine_and_for_a_core_sweep(result: dict[str, Any], tmp_path: Path) -> None:
    one = {"label": "t", "started": "now", "cores": 2, "machine": {"cpu_model": "cpu", "usable_cores": 2},
           "images": {"count": 1, "avg_bytes": 1}, "ultralytics": {"absent": "ultralytics is not installed"},
           "reference": {"onnx": "m.onnx", "session": "defaults", "decode": "full"}, **result}
    lines = report_lines(one)
    assert any(line.startswith("| 2 | 4 | images/s |") for line in lines)
    assert "Ultralytics column absent: ultralytics is not installed." in lines
    plot = write_plot(one, tmp_path / "one.png")
    assert plot is not None and plot.stat().st_size > 1000
    sweep = {"label": "t", "machine": one["machine"], "per_core": {"1": {**one, "cores": 1}, "2": one}}
    assert [line.split("|")[1].strip() for line in report_lines(sweep) if line.startswith("| 1 |")
            or line.startswith("| 2 |")] == ["1", "1", "1", "2", "2", "2"]
    plot = write_plot(sweep, tmp_path / "sweep.png")
    assert plot is not None and plot.stat().st_size > 1000


def test_the_in_process_reference_detects_like_the_project_does() -> None:
    pipeline = InProcessPipeline(DEMO_ONNX, Thresholds(0.25, 0.45, 100))
    images = synthetic_images([(1280, 720)], per_size=2, seed=4)
    found = [pipeline(image) for image in images]
    assert all(out.num_detections[0, 0] > 0 for out in found)
    boxes = np.concatenate([out.boxes[0, : out.num_detections[0, 0]] for out in found])
    assert (boxes[:, 2] <= 1280).all() and (boxes[:, 3] <= 720).all() and (boxes[:, :2] >= 0).all()


def test_the_reference_session_has_a_spinning_thread_per_usable_core() -> None:
    import os

    pipeline = InProcessPipeline(DEMO_ONNX, Thresholds(0.25, 0.45, 100))
    options = pipeline.runner._session.get_session_options()
    assert pipeline.threads == len(os.sched_getaffinity(0)) == options.intra_op_num_threads
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_issue_35_goals_against_ultralytics_and_the_bare_detector() -> None:
    spread = lambda v: {"median": v, "min": v, "max": v}  # noqa: E731
    found = goals_35({"ultralytics": {"rps_1": spread(1.05), "rps_4": spread(1.29)}, "detector": {"p50_1": spread(1.3)}})
    assert found["ultralytics_1_stream_rps"]["met"] is True
    assert found["ultralytics_4_streams_rps"]["met"] is False
    assert found["lone_request_p50_vs_detector"]["met"] is True
    assert goals_35({"detector": {"p50_1": spread(1.31)}})["lone_request_p50_vs_detector"]["met"] is False


def test_sessions_made_with_default_threads_get_the_pinnings_count() -> None:
    import onnxruntime

    with session_threads(3):
        session = onnxruntime.InferenceSession(str(DEMO_ONNX), providers=["CPUExecutionProvider"])
        explicit = onnxruntime.SessionOptions()
        explicit.intra_op_num_threads = 1
        kept = onnxruntime.InferenceSession(str(DEMO_ONNX), explicit, providers=["CPUExecutionProvider"])
    assert session.get_session_options().intra_op_num_threads == 3
    assert kept.get_session_options().intra_op_num_threads == 1
    assert onnxruntime.InferenceSession.__name__ == "InferenceSession"  # restored


def test_ultralytics_absent_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert "ultralytics is not installed" in str(ultralytics_missing())


def test_without_a_model_the_command_says_what_to_give() -> None:
    done = subprocess.run([sys.executable, "-m", "loadtest", "versus"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)
    assert done.returncode == 1 and "give --onnx MODEL" in done.stderr + done.stdout


@pytest.mark.integration
def test_versus_serves_the_demo_and_a_variant_and_writes_json_markdown_and_plot(tmp_path: Path) -> None:
    """One real run (each run starts a server and builds: one covers both): the four sides but Ultralytics', a
    variant build (--detector-spin run) served beside the first by the same server, and the decomposition."""
    done = subprocess.run([sys.executable, "-m", "loadtest", "versus", "--onnx", str(DEMO_ONNX), "--rounds", "1",
                           "--window", "1", "--streams", "1,2", "--no-ultralytics", "--variant-arg=--detector-spin",
                           "--variant-arg=run", "--results-dir", str(tmp_path), "--label", "demo"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (written,) = tmp_path.glob("*-demo.json")
    data = json.loads(written.read_text())
    (record,) = data["rounds"]
    assert data["variant"] == {"model": "yolo_variant", "build_args": ["--detector-spin", "run"]}
    for side in (SERVED, VARIANT, REFERENCE, DETECTOR):
        for streams in ("1", "2"):
            assert record[side][streams]["requests"] > 0 and record[side][streams]["failures"] == 0
    assert record[SERVED]["1"]["stages"]["yolo_detector"]["executions"] > 0
    assert record[SERVED]["1"]["cpu_ms_per_image"] > 0 and record[REFERENCE]["1"]["cpu_ms_per_image"] > 0
    assert data["ultralytics"] == {"absent": "left out (--no-ultralytics)"}
    # The decomposition: Triton's trace of every request of one window per stream count, step by step.
    served = data["breakdown"]["served"]
    for streams in ("1", "2"):
        assert served[streams]["steps"] == ["yolo_preprocess", "yolo_detector", "yolo_nms"]
        assert served[streams]["requests"] > 0 and served[streams]["steps_ms"]["yolo_detector"]["compute"] > 0
    assert record["ratios"][VARIANT]["p50_1"] > 0
    assert "| yolo_detector: compute |" in written.with_suffix(".md").read_text()
    assert "| served / variant |" in written.with_suffix(".md").read_text()
    assert written.with_suffix(".md").is_file() and written.with_suffix(".png").stat().st_size > 1000


def test_the_bare_detector_side_says_why_when_the_detector_is_not_onnx_runtime_here(tmp_path: Path) -> None:
    from loadtest.bare_detector import BareDetector
    from loadtest.errors import LoadTestError

    step = tmp_path / "yolo_detector"
    step.mkdir()
    (step / "config.pbtxt").write_text('name: "yolo_detector"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n')
    with pytest.raises(LoadTestError, match="no bare detector side: detector is tensorrt_plan, not ONNX Runtime"):
        BareDetector(tmp_path, "yolo", [b"x"])


def test_a_variant_build_is_one_more_side_paired_with_the_first_and_reported_beside_it() -> None:
    # Served: 10 ms a frame; its variant: 20 ms; both in every round, ratios within the round.
    sides = [Side(SERVED, sleeper(10), process_cpu_s), Side(VARIANT, sleeper(20), process_cpu_s),
             Side(REFERENCE, sleeper(10), process_cpu_s)]
    rounds = run_rounds(sides, [b"x"], VersusSettings(streams=(1,), rounds=2, window_s=0.3))
    assert all(set(r["order"]) == {SERVED, VARIANT, REFERENCE} for r in rounds["rounds"])
    assert 0.4 < rounds["summary"]["ratios"][VARIANT]["p50_1"]["median"] < 0.6
    one = {"label": "t", "started": "now", "cores": 2, "machine": {"cpu_model": "cpu", "usable_cores": 2},
           "images": {"count": 1, "avg_bytes": 1}, "ultralytics": {"absent": "left out"},
           VARIANT: {"model": "yolo_variant", "build_args": ["--detector-spin", "run"]},
           "reference": {"onnx": "m.onnx", "session": "defaults", "decode": "full"}, **rounds}
    lines = report_lines(one)
    assert any("its variant (--detector-spin run)" in line for line in lines)
    (row,) = [line for line in lines if line.startswith("| 2 | 1 | p50 ms |") and line.count("|") == 10]
    assert float(row.split("|")[6].split()[0]) < 0.6  # served / variant, the round's own ratio
    # The variant against the other sides in the same rounds: its own issue-35 goals come from these.
    assert 1.7 < rounds["summary"]["variant_ratios"][REFERENCE]["p50_1"]["median"] < 2.3
    assert set(rounds["summary"]["variant_ratios"]) == {REFERENCE}
    assert any(line.startswith("Issue 35's goals for the variant") for line in lines)


def test_a_variant_needs_both_builds_made_here() -> None:
    done = subprocess.run([sys.executable, "-m", "loadtest", "versus", "--repository", str(ROOT), "--url",
                           "127.0.0.1:1", "--variant-arg=--detector-spin", "--variant-arg=run"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 1
    assert "--variant-arg builds both sides from --onnx and serves them here" in done.stderr + done.stdout
