"""``python -m generator``: help works, user errors are one line on stderr and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.cli import main
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata

ROOT = Path(__file__).resolve().parents[3]


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def assert_one_line_error(stderr: str, fragment: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in stderr


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(make_detector(metadata=ultralytics_metadata()), tmp_path_factory.mktemp("cli") / "tiny.onnx")


def test_help_lists_the_subcommands() -> None:
    done = run_module("--help")
    assert done.returncode == 0, done.stderr
    for command in ("build", "serve", "check", "validate", "plan", "selftest"):
        assert command in done.stdout
    assert "unavailable" not in done.stdout


def test_build_help_has_the_contract_flags() -> None:
    done = run_module("build", "--help")
    assert done.returncode == 0, done.stderr
    for flag in ("--onnx", "--output", "--target", "--name", "--precision", "--max-batch", "--conf-threshold",
                 "--iou-threshold", "--max-detections", "--defer-plan", "--device", "--ort-tensorrt"):
        assert flag in done.stdout
    assert "{embedded,onnxruntime,tensorrt}" in done.stdout


def test_bad_onnx_is_one_line_and_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not an ONNX model")
    done = run_module("build", "--onnx", str(bad), "--output", str(tmp_path / "repo"))
    assert done.returncode == 1
    assert_one_line_error(done.stderr, "is not a valid ONNX model")
    assert not (tmp_path / "repo").exists()


def test_tensorrt_target_here_stops_with_a_clear_message(onnx_path: Path, tmp_path: Path) -> None:
    done = run_module("build", "--onnx", str(onnx_path), "--output", str(tmp_path / "repo"), "--target", "tensorrt")
    assert done.returncode == 1
    assert_one_line_error(done.stderr, "TensorRT")
    assert "GPU" in done.stderr
    assert not (tmp_path / "repo").exists()


def test_successful_build_in_process(onnx_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--onnx", str(onnx_path), "--output", str(tmp_path / "repo"), "--name", "tiny",
                 "--max-batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "v8 head, 2 classes, input 64x64, dynamic batch" in out
    assert "NMS receives [N, 6, anchors] (layout v8_reduced)" in out
    assert (tmp_path / "repo" / "tiny_detector" / "config.pbtxt").is_file()


def test_no_reduce_head_flag(onnx_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--onnx", str(onnx_path), "--output", str(tmp_path / "repo"), "--no-reduce-head"]) == 0
    assert "NMS receives" not in capsys.readouterr().out
    manifest = json.loads((tmp_path / "repo" / "manifest.json").read_text())
    assert manifest["detector"]["reduce_head"] is False and manifest["detector"]["served_layout"] == "v8"


def test_detector_threads_flag(onnx_path: Path, tmp_path: Path) -> None:
    assert main(["build", "--onnx", str(onnx_path), "--output", str(tmp_path / "repo"),
                 "--detector-threads", "3"]) == 0
    detector = (tmp_path / "repo" / "yolo_detector" / "config.pbtxt").read_text()
    assert 'key: "intra_op_threads"\n  value { string_value: "3" }' in detector


@pytest.mark.parametrize(("args", "fragment"), [
    (["--name", "../x"], "invalid --name '../x'"),
    (["--max-batch", "0"], "--max-batch must be between 1 and 1024"),
    (["--conf-threshold", "1.5"], "--conf-threshold must be in [0, 1)"),
    (["--imgsz", "640", "640"], "does not match the model's fixed input 64x64"),
    (["--onnx", "/nonexistent/model.onnx"], "ONNX file not found"),
])
def test_user_errors_in_process(onnx_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                args: list[str], fragment: str) -> None:
    argv = ["build", "--onnx", str(onnx_path), "--output", str(tmp_path / "repo"), *args]
    assert main(argv) == 1
    assert_one_line_error(capsys.readouterr().err, fragment)
    assert not (tmp_path / "repo").exists()


def test_existing_foreign_output_needs_force(onnx_path: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "repo"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    assert main(["build", "--onnx", str(onnx_path), "--output", str(output)]) == 1
    assert_one_line_error(capsys.readouterr().err, "--force")
    assert (output / "keep.txt").read_text() == "mine"
    assert main(["build", "--onnx", str(onnx_path), "--output", str(output), "--force"]) == 0
    assert not (output / "keep.txt").exists()


def test_unwritable_output_is_one_line(onnx_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["build", "--onnx", str(onnx_path), "--output", str(blocker / "repo")]) == 1
    assert_one_line_error(capsys.readouterr().err, "cannot write")


def test_unknown_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["build", "--no-such-flag"])
    assert caught.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
