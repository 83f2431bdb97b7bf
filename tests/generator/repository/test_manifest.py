import json
from dataclasses import replace
from typing import Any

import pytest

from generator.repository.check import compare
from generator.repository.files import hash_files, hash_repository
from generator.repository.host import GpuInfo, MachineFacts
from generator.repository.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    PlanFacts,
    Thresholds,
    read_manifest,
    server_flags,
)


def write_manifest(repository, manifest):
    """Hash the repository as it is on disk and write its manifest (builds do this in memory)."""
    final = replace(manifest, files=hash_repository(repository))
    (repository / MANIFEST_NAME).write_text(json.dumps(final.to_json(), indent=2) + "\n")
    return final

A100 = GpuInfo("NVIDIA A100-SXM4-40GB", "8.0")
L4 = GpuInfo("NVIDIA L4", "8.9")
T4 = GpuInfo("Tesla T4", "7.5")


def _repository(root):
    files = {
        "yolo/config.pbtxt": b'name: "yolo"\nplatform: "ensemble"\n',
        "yolo/1/.keep": b"",
        "yolo_detector/config.pbtxt": b'platform: "tensorrt_plan"\n',
        "yolo_detector/1/model.plan": b"\x00plan-bytes" * 100,
        "yolo_preprocess/1/model.py": b"def execute():\n    pass\n",
        "yolo_nms/1/model.py": b"# nms\n",
    }
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    return files


def _plan(**kwargs):
    values: dict[str, Any] = {
        "plan_file": "yolo_detector/1/model.plan",
        "tensorrt_version": "10.3.0.26",
        "cuda_version": "12.6",
        "gpu_name": A100.name,
        "compute_capability": "8.0",
        "triton_image": "nvcr.io/nvidia/tritonserver:24.08-py3",
    }
    values.update(kwargs)
    return PlanFacts(**values)


def _manifest(plan=None, **kwargs):
    values = {
        "name": "yolo",
        "target": "tensorrt" if plan else "onnxruntime",
        "precision": "int8",
        "onnx_sha256": "ab" * 32,
        "thresholds": Thresholds(0.25, 0.45, 100),
        "calibration_method": "entropy",
        "calibration_digest": "cd" * 32,
        "max_batch": 8,
        "plan": plan,
        "source_onnx_path": "/models/yolo.onnx",
        "validation_skipped": True,
    }
    values.update(kwargs)
    return Manifest(**values)


def _machine(version="10.3.0.26", gpus=(A100,), cuda="12.6"):
    return MachineFacts(
        tensorrt_version=version, cuda_version=cuda, driver_version="560.35", gpus=tuple(gpus)
    )


@pytest.fixture
def repo(tmp_path):
    files = _repository(tmp_path)
    written = write_manifest(tmp_path, _manifest(plan=_plan()))
    assert written.files == hash_files(files)
    return tmp_path


def test_roundtrip_records_everything(repo):
    manifest = read_manifest(repo)
    assert manifest == _manifest(plan=_plan(), files=hash_repository(repo))
    data = json.loads((repo / MANIFEST_NAME).read_text())
    assert MANIFEST_NAME not in data["files"] and "yolo_detector/1/model.plan" in data["files"]
    assert data["validation_skipped"] is True
    assert data["tensorrt"]["compute_capability"] == "8.0"
    assert data["calibration"] == {"method": "entropy", "digest": "cd" * 32}
    assert data["tensorrt"]["status"] == "built" and data["tensorrt"]["plan_file"] == "yolo_detector/1/model.plan"


def test_everything_matches_on_the_build_machine(repo):
    assert compare(read_manifest(repo), _machine(), repo) == []


def test_tampered_model_file(repo):
    (repo / "yolo_detector/1/model.plan").write_bytes(b"tampered")
    (mismatch,) = compare(read_manifest(repo), _machine(), repo)
    assert mismatch.kind == "file_changed" and mismatch.subject == "yolo_detector/1/model.plan"
    assert mismatch.message.startswith("model file yolo_detector/1/model.plan changed since build (sha256 ")
    assert (
        "rebuild with python -m generator build --onnx /models/yolo.onnx --target tensorrt"
        in mismatch.message
    )


def test_missing_added_and_runtime_files(repo):
    (repo / "yolo_nms/1/model.py").unlink()
    (repo / "yolo_nms/1/extra.py").write_text("x = 1\n")
    (repo / "yolo_nms/1/__pycache__").mkdir()
    (repo / "yolo_nms/1/__pycache__/model.cpython-311.pyc").write_bytes(b"\x00")
    kinds = {(m.kind, m.subject) for m in compare(read_manifest(repo), _machine(), repo)}
    assert kinds == {("file_missing", "yolo_nms/1/model.py"), ("file_added", "yolo_nms/1/extra.py")}


def test_tensorrt_version_mismatch(repo):
    (mismatch,) = compare(read_manifest(repo), _machine(version="10.8.0.43"), repo)
    assert mismatch.kind == "tensorrt_version"
    assert mismatch.message.startswith(
        "plan built with TensorRT 10.3.0 but this machine has 10.8.0: a plan loads only with the TensorRT that "
        "built it (10.3.0), not 10.8.0; rebuild the plan with this TensorRT on this GPU: "
        f"python -m generator plan {repo} --force"
    )


def test_version_compatible_plans_run_on_newer_tensorrt_of_the_same_major(tmp_path):
    _repository(tmp_path)
    manifest = write_manifest(tmp_path, _manifest(plan=_plan(version_compatible=True)))
    assert compare(manifest, _machine(version="10.8.0.43"), tmp_path) == []
    assert [m.kind for m in compare(manifest, _machine(version="10.2.0.19"), tmp_path)] == [
        "tensorrt_version"
    ]
    # TensorRT 10 version-compatible plans run on TensorRT 11 (TensorRT 11.4 support matrix) ...
    assert compare(manifest, _machine(version="11.0.0.1"), tmp_path) == []
    # ... TensorRT 8.6 ones do not.
    old = write_manifest(tmp_path, _manifest(plan=_plan(tensorrt_version="8.6.1.6", version_compatible=True)))
    assert [m.kind for m in compare(old, _machine(version="11.0.0.1"), tmp_path)] == ["tensorrt_version"]
    assert compare(old, _machine(version="10.3.0.26"), tmp_path) == []


def test_compute_capability_mismatch_and_ampere_plus(tmp_path):
    _repository(tmp_path)
    exact = write_manifest(tmp_path, _manifest(plan=_plan()))
    mismatches = compare(exact, _machine(gpus=(A100, L4)), tmp_path)
    assert [(m.kind, m.subject) for m in mismatches] == [("compute_capability", "gpu1")]
    assert "plan built for compute capability 8.0" in mismatches[0].message
    assert "NVIDIA L4 with 8.9" in mismatches[0].message
    portable = write_manifest(tmp_path, _manifest(plan=_plan(hardware_compatibility="ampere_plus")))
    assert compare(portable, _machine(gpus=(A100, L4)), tmp_path) == []
    (t4,) = compare(portable, _machine(gpus=(T4,)), tmp_path)
    assert t4.kind == "compute_capability" and ">= 8.0 (AMPERE_PLUS)" in t4.message


def test_machine_without_tensorrt_or_gpu(repo):
    mismatches = compare(read_manifest(repo), _machine(version=None, gpus=(), cuda=None), repo)
    assert [m.kind for m in mismatches] == ["tensorrt_missing", "gpu_missing"]
    assert "--files-only" in mismatches[0].message
    assert "nvcr.io/nvidia/tritonserver:24.08-py3" in mismatches[0].message


def test_old_driver(repo):
    (mismatch,) = compare(read_manifest(repo), _machine(cuda="11.8"), repo)
    assert mismatch.kind == "cuda_version" and "update the NVIDIA driver" in mismatch.message


def test_files_only_and_non_plan_repositories_skip_machine_facts(repo, tmp_path_factory):
    assert compare(read_manifest(repo), None, repo) == []
    other = tmp_path_factory.mktemp("ort")
    _repository(other)
    manifest = write_manifest(other, _manifest(plan=None))
    assert compare(manifest, _machine(version=None, gpus=()), other) == []


def test_reads_the_layout_written_by_the_first_build_command(tmp_path):
    files = _repository(tmp_path)
    data = {
        "tool": "triton-detection-ensemble",
        "tool_version": "0.1.0",
        "name": "yolo",
        "target": "embedded",
        "precision": "fp16",
        "detector": {"layout": "yolov8", "image_size": [320, 320]},
        "thresholds": {"conf": 0.25, "iou": 0.45, "max_detections": 100},
        "max_batch": 8,
        "precision_facts": {"calibration_method": "minmax", "calibration_digest": "ef" * 32},
        "files": hash_files(files),
        "validation": "skipped (--no-validate)",
        "source_onnx": {"path": "/x/demo.onnx", "sha256": "12" * 32},
    }
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    manifest = read_manifest(tmp_path)
    assert manifest.onnx_sha256 == "12" * 32 and manifest.validation_skipped
    assert manifest.calibration_method == "minmax" and manifest.detector is not None
    assert manifest.detector.layout == "yolov8" and manifest.detector.image_size == (320, 320)
    assert compare(manifest, None, tmp_path) == []
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_missing_or_malformed_manifest(tmp_path):
    with pytest.raises(ManifestError, match=r"no manifest\.json; build it"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text('{"name": "yolo"}')
    with pytest.raises(ManifestError, match="malformed"):
        read_manifest(tmp_path)


def test_a_pending_plan_says_which_command_builds_it(tmp_path):
    _repository(tmp_path)
    (tmp_path / "yolo_detector/1/model.plan").unlink()
    pending = PlanFacts(plan_file="yolo_detector/1/model.plan", spec_file="yolo_detector/1/build_spec.json",
                        status="pending", triton_image="nvcr.io/nvidia/tritonserver:26.08-py3")
    manifest = write_manifest(tmp_path, _manifest(plan=pending))
    assert read_manifest(tmp_path).plan == pending and pending.pending
    assert compare(manifest, None, tmp_path) == []  # the files are complete without the plan
    for machine in (_machine(), _machine(version=None, gpus=())):
        (mismatch,) = compare(manifest, machine, tmp_path)
        assert mismatch.kind == "plan_pending"
        assert mismatch.message.endswith(f"run: python -m generator plan {tmp_path}")
        assert "NGC TensorRT image of the same release as nvcr.io/nvidia/tritonserver:26.08-py3" in mismatch.message


def test_server_flags_come_from_the_plan():
    assert server_flags(_manifest(plan=None)) == []
    assert server_flags(_manifest(plan=_plan())) == []
    assert server_flags(_manifest(plan=_plan(version_compatible=True))) == [
        "--backend-config=tensorrt,version-compatible=true"]
    data = _manifest(plan=_plan(version_compatible=True)).to_json()
    assert data["tensorrt"]["version_compatible"] is True
    assert server_flags(Manifest.from_json(data)) == ["--backend-config=tensorrt,version-compatible=true"]


def test_reads_the_first_plan_record_layout(tmp_path):
    files = _repository(tmp_path)
    data = _manifest(plan=None, files=hash_files(files)).to_json()
    data["tensorrt"] = {"tensorrt_version": "10.3.0.26", "cuda_version": "12.6", "gpu_name": A100.name,
                        "compute_capability": "8.0", "triton_image": None, "hardware_compatibility": "none",
                        "version_compatible": False, "plan_files": ["yolo_detector/1/model.plan"]}
    data["profiles"] = []
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    plan = read_manifest(tmp_path).plan
    assert plan is not None and not plan.pending and plan.plan_file == "yolo_detector/1/model.plan"
    assert compare(read_manifest(tmp_path), _machine(), tmp_path) == []
