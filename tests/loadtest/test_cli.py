from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from loadtest.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_the_subcommands():
    result = subprocess.run([sys.executable, "-m", "loadtest", "--help"], capture_output=True, text=True, cwd=ROOT,
                            check=False)
    assert result.returncode == 0
    for name in ("run", "perf-analyzer", "bench", "soak"):
        assert name in result.stdout


def test_user_errors_are_one_line_and_exit_1(capsys, tmp_path):
    assert main(["run", "--url", "127.0.0.1:1", "--users", "0", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--users" in err[0]
    assert main(["bench", "--results-dir", str(tmp_path)]) == 1
    assert "--repository" in capsys.readouterr().err
    assert main(["soak", "--url", "127.0.0.1:1", "--duration", "1m", "--warmup", "2m"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--warmup" in err[0]
    assert main(["soak", "--url", "grpcs://127.0.0.1:1"]) == 1
    assert "TLS" in capsys.readouterr().err


def test_measurements_go_to_runs_by_default():
    """Runs are measurements, not source files: they land in the git-ignored runs/ folder."""
    parser, _ = build_parser()
    assert parser.parse_args(["bench"]).results_dir == Path("runs") / "bench"
    assert parser.parse_args(["run", "--url", "h:1"]).out == Path("runs") / "locust"
    assert parser.parse_args(["perf-analyzer", "--url", "h:1"]).out == Path("runs") / "perf-analyzer"
    assert "/runs/" in (ROOT / ".gitignore").read_text()


def test_perf_analyzer_inputs_only_writes_json_and_prints_the_command(capsys, tmp_path):
    code = main(["perf-analyzer", "--url", "127.0.0.1:8001", "--sizes", "64x48", "--images-per-size", "2",
                 "--out", str(tmp_path), "--inputs-only"])
    assert code == 0
    out = capsys.readouterr().out
    assert "wrote 2 images" in out and f"--input-data {tmp_path / 'input_data.json'}" in out
    assert (tmp_path / "input_data.json").stat().st_size > 0


def test_nms_bench_runs_both_nms_paths_on_the_demo(capsys):
    """``nms-bench`` (user-facing, any machine): both NMS paths select the same detections, timings are real."""
    import json

    assert main(["nms-bench", "--batch", "2", "--rounds", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # after the build's log lines
    assert result["same_detections"] is True and result["detections"] > 0
    assert result["python_step_ms"]["median"] > 0 and result["graph_nms_and_map_back_ms"]["median"] > 0
