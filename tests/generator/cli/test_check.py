import argparse

import pytest

from generator.builder.manifest import Manifest, PlanFacts, Thresholds, write_manifest
from generator.builder.tensorrt.availability import machine_facts
from generator.cli import check, main


def _repository(root, plan=None):
    (root / "yolo_detector/1").mkdir(parents=True)
    (root / "yolo_detector/config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    (root / "yolo_detector/1/model.onnx").write_bytes(b"onnx" * 64)
    manifest = Manifest(
        name="yolo",
        target="tensorrt" if plan else "onnxruntime",
        precision="fp32",
        onnx_sha256="00" * 32,
        thresholds=Thresholds(0.25, 0.45, 100),
        plan=plan,
        source_onnx_path="/models/yolo.onnx",
    )
    write_manifest(root, manifest)
    return root


def test_clean_repository_exits_0(tmp_path, capsys):
    assert main(["check", str(_repository(tmp_path))]) == 0
    assert "2 files match the manifest" in capsys.readouterr().out


def test_tampered_file_exits_1_with_one_line_per_mismatch(tmp_path, capsys):
    repo = _repository(tmp_path)
    (repo / "yolo_detector/1/model.onnx").write_bytes(b"changed")
    (repo / "yolo_detector/config.pbtxt").write_text("max_batch_size: 64\n")
    assert main(["check", str(repo)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("mismatch: model file yolo_detector/1/model.onnx changed since build (sha256 ")
    assert "rebuild with python -m generator build --onnx /models/yolo.onnx" in lines[0]
    assert lines[1].startswith("mismatch: config yolo_detector/config.pbtxt changed since build")
    assert lines[2].endswith("2 mismatch(es)")


PLAN = PlanFacts("10.3.0.26", "12.6", "NVIDIA A100-SXM4-40GB", "8.0", "nvcr.io/nvidia/tritonserver:24.08-py3")


@pytest.mark.skipif(machine_facts().tensorrt_version is not None, reason="TensorRT is present here")
def test_plan_repository_on_a_machine_without_tensorrt(tmp_path, capsys):
    repo = _repository(tmp_path, PLAN)
    assert main(["check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "plan was built with TensorRT 10.3 on NVIDIA A100-SXM4-40GB" in err and "--files-only" in err
    assert main(["check", "--files-only", str(repo)]) == 0
    assert "files checked" in capsys.readouterr().out


def test_user_errors_are_one_line(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope")]) == 1
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path / 'nope'} is not a directory; pass the model repository built by generator build"
    )
    assert main(["check", str(tmp_path)]) == 1
    assert "no manifest.json" in capsys.readouterr().err


def test_module_contract():
    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    args = parser.parse_args(["repo", "--offline"])
    assert args.files_only is True
