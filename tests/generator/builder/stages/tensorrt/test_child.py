import json
import os
import subprocess
import sys

import pytest

from generator.builder.stages.tensorrt.builder import BuildSpec
from generator.builder.stages.tensorrt.child import (
    REPORT_NAME,
    SCRIPT_NAME,
    SPEC_NAME,
    run_build_in_child,
    write_build_files,
)
from generator.builder.stages.tensorrt.errors import EngineBuildError
from generator.builder.stages.tensorrt.profiles import detector_profile
from generator.repository.host import query_gpus, tensorrt_problem

CAN_BUILD = tensorrt_problem() is None and query_gpus()[3] is None


def _spec(directory):
    return BuildSpec(
        onnx_path=str(directory / "detector.onnx"),
        plan_path=str(directory / "model.plan"),
        profiles=(detector_profile("images", ["n", 3, 32, 32], 2),),
        timing_cache_path=str(directory.parent / "timing.cache"),
    )


def test_build_files_are_relative_and_the_script_is_executable(tmp_path):
    directory = tmp_path / "yolo_detector" / "1"
    spec_path, script = write_build_files(_spec(directory), directory)
    assert spec_path == directory / SPEC_NAME and script == directory / SCRIPT_NAME
    data = json.loads(spec_path.read_text())
    assert data["onnx_path"] == "detector.onnx" and data["plan_path"] == "model.plan"
    assert data["timing_cache_path"] == str((tmp_path / "yolo_detector" / "timing.cache").resolve())
    assert os.access(script, os.X_OK)
    text = script.read_text()
    assert "-m generator.builder.stages.tensorrt.child --spec build_spec.json" in text
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0


@pytest.mark.skipif(CAN_BUILD, reason="this machine has TensorRT and a GPU")
def test_child_refuses_to_fake_a_build_and_the_parent_reports_why(tmp_path):
    directory = tmp_path / "detector" / "1"
    (directory).mkdir(parents=True)
    (directory / "detector.onnx").write_bytes(b"not used: the availability check comes first")
    with pytest.raises(EngineBuildError) as caught:
        run_build_in_child(_spec(directory), directory, timeout=120)
    message = str(caught.value)
    assert "cannot build a TensorRT plan on this machine" in message
    assert "pip install tensorrt" in message and SCRIPT_NAME in message
    assert not (directory / "model.plan").exists() and not (directory / REPORT_NAME).exists()


@pytest.mark.skipif(CAN_BUILD, reason="this machine has TensorRT and a GPU")
def test_child_cli_exits_1_with_one_line(tmp_path):
    directory = tmp_path / "d"
    spec_path, _ = write_build_files(_spec(directory), directory)
    result = subprocess.run(
        [sys.executable, "-m", "generator.builder.stages.tensorrt.child", "--spec", str(spec_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: cannot build a TensorRT plan")


def test_the_child_command_can_be_pointed_elsewhere(monkeypatch):
    from generator.builder.stages.tensorrt.child import CHILD_ENV, child_command

    monkeypatch.delenv(CHILD_ENV, raising=False)
    assert child_command() == [sys.executable, "-m", "generator.builder.stages.tensorrt.child"]
    monkeypatch.setenv(CHILD_ENV, "docker exec builder 'python3' -m generator.builder.stages.tensorrt.child")
    assert child_command() == ["docker", "exec", "builder", "python3", "-m", "generator.builder.stages.tensorrt.child"]


@pytest.mark.skipif(CAN_BUILD, reason="this machine has TensorRT and a GPU")
def test_probe_says_what_this_machine_lacks(monkeypatch):
    from generator.builder.stages.tensorrt.child import CHILD_ENV, probe_builder
    from generator.builder.stages.tensorrt.errors import TensorRTUnavailableError

    monkeypatch.delenv(CHILD_ENV, raising=False)
    with pytest.raises(TensorRTUnavailableError, match=r"^cannot build a TensorRT plan on this machine: ") as caught:
        probe_builder()
    assert "\n" not in str(caught.value)


def test_probe_reports_the_childs_machine(monkeypatch):
    from generator.builder.stages.tensorrt.child import probe_builder
    from tests.generator.builder.stages.tensorrt.fake_child import GPU, use_fake_child

    use_fake_child(monkeypatch)
    monkeypatch.setenv("FAKE_TRT_VERSION", "11.1.0.4")
    facts = probe_builder()
    assert facts.tensorrt_version == "11.1.0.4"
    assert facts.gpu is not None and (facts.gpu.name, facts.gpu.compute_capability) == (GPU["name"], "9.0")
