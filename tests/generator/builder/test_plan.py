"""``--defer-plan`` then ``python -m generator plan``: the repository is completed on the GPU host, or left as it was.

The TensorRT child is the stand-in of ``fake_child.py``; the spec checks, the binding checks, the manifest
update and the atomic rewrite all run for real.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, TensorRTOptions
from generator.cli import main
from generator.repository.files import hash_repository
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata
from tests.generator.builder.stages.tensorrt.fake_child import use_fake_child


def snapshot(repo: Path) -> dict[str, str]:
    return {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(repo.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = make_detector("v8", num_classes=3, metadata=ultralytics_metadata(names=("a", "b", "c")), seed=8)
    return save(model, tmp_path_factory.mktemp("plan") / "tiny.onnx")


# Given, not measured: a measured service time would size the queues differently in two builds.
SERVICE_MS = 50.0


def deferred(onnx_path: Path, output: Path, **tensorrt: object) -> Path:
    options = BuildOptions(target="tensorrt", max_batch=8, service_ms=SERVICE_MS,
                           tensorrt=TensorRTOptions(defer_plan=True, **tensorrt))  # type: ignore[arg-type]
    return build_repository(onnx_path, output, options).output


def test_deferred_build_writes_everything_but_the_plan_without_tensorrt(onnx_path: Path, tmp_path: Path) -> None:
    repo = deferred(onnx_path, tmp_path / "repo")  # no TensorRT child configured: none is needed
    files = set(snapshot(repo))
    assert "yolo_detector/1/model.plan" not in files
    assert {"yolo_detector/1/model.onnx", "yolo_detector/1/build_spec.json", "yolo_detector/1/reproduce_build.sh",
            "yolo_detector/warmup/real_image", "yolo_detector/config.pbtxt"} <= files
    plan = json.loads((repo / "manifest.json").read_text())["tensorrt"]
    assert plan["status"] == "pending" and plan["tensorrt_version"] is None
    assert plan["plan_file"] == "yolo_detector/1/model.plan"


def test_plan_completes_the_repository_like_a_direct_build(onnx_path: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    use_fake_child(monkeypatch)
    repo = deferred(onnx_path, tmp_path / "deferred")
    assert main(["plan", str(repo)]) == 0
    assert "built yolo_detector/1/model.plan" in capsys.readouterr().out
    direct = build_repository(onnx_path, tmp_path / "direct",
                              BuildOptions(target="tensorrt", max_batch=8, service_ms=SERVICE_MS)).output
    completed, built = snapshot(repo), snapshot(direct)
    assert set(completed) == set(built)
    different = {p for p in completed if completed[p] != built[p]}
    assert different == {"manifest.json"}  # it records --defer-plan in the options and rebuild command
    manifest = json.loads((repo / "manifest.json").read_text())
    assert manifest["tensorrt"]["status"] == "built" and manifest["files"] == hash_repository(repo)
    assert main(["check", "--files-only", str(repo)]) == 0
    assert main(["plan", str(repo)]) == 1
    assert "already has its plan" in capsys.readouterr().err
    assert main(["plan", "--force", str(repo)]) == 0


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("FAKE_CHILD_FAIL", "1", "TensorRT build failed: TensorRT failed to build the plan (FAKE_CHILD_FAIL); rerun"),
    # The plan's bindings are checked the way Triton's TensorRT backend will, before anything is written.
    ("FAKE_CHILD_OUTPUT_DTYPE", "HALF", "unexpected datatype TYPE_FP32 for inference output 'detections', "
                                        "expecting TYPE_FP16"),
])
def test_a_failed_plan_leaves_the_repository_as_it_was(onnx_path: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, capsys,
                                                       variable: str, value: str, message: str) -> None:
    use_fake_child(monkeypatch)
    repo = deferred(onnx_path, tmp_path / "repo")
    before = snapshot(repo)
    monkeypatch.setenv(variable, value)
    assert main(["plan", str(repo)]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert snapshot(repo) == before


def edit(repo: Path, path: str, change) -> None:
    """Edit a file and re-record the manifest hashes: a consistent repository with a wrong spec or config."""
    target = repo / path
    target.write_text(change(target.read_text()))
    manifest = json.loads((repo / "manifest.json").read_text())
    manifest["files"] = hash_repository(repo)
    (repo / "manifest.json").write_text(json.dumps(manifest))


def _spec(change):
    def apply(text: str) -> str:
        spec = json.loads(text)
        change(spec["profiles"][0])
        return json.dumps(spec)
    return apply


@pytest.mark.parametrize(("path", "change", "message"), [
    ("yolo_detector/1/build_spec.json", _spec(lambda p: p.update(input="images")),
     "the build spec has a profile for 'images' but the ONNX inputs are ['images_bgr_u8']"),
    ("yolo_detector/1/build_spec.json", _spec(lambda p: [p[k].__setitem__(1, 32) for k in ("min", "opt", "max")]),
     "the profile for 'images_bgr_u8' gives dim 1 [32] but the ONNX fixes it at 64"),
    ("yolo_detector/1/build_spec.json", _spec(lambda p: [p[k].__setitem__(0, 4) for k in ("opt", "max")]),
     "configuration specified max-batch 8 but TensorRT engine only supports max-batch 4"),
    ("yolo_detector/1/build_spec.json", _spec(lambda p: p.update(min=[2, 64, 64, 3])),
     "the engine profile starts at batch 2, not 1"),
    ("yolo_detector/config.pbtxt", lambda text: text.replace("TYPE_UINT8", "TYPE_FP32", 1),
     "unexpected datatype TYPE_FP32 for inference input 'images_bgr_u8', expecting TYPE_UINT8"),
    ("yolo_detector/config.pbtxt", lambda text: text.replace("KIND_GPU", "KIND_CPU"),
     "TensorRT backend supports only GPU device"),
])
def test_a_spec_that_does_not_fit_is_refused_before_any_build(onnx_path: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, capsys,
                                                              path: str, change, message: str) -> None:
    use_fake_child(monkeypatch)
    repo = deferred(onnx_path, tmp_path / "repo")
    edit(repo, path, change)
    before = snapshot(repo)
    assert main(["plan", str(repo)]) == 1
    err = capsys.readouterr().err
    assert message in err and "the build spec does not fit this repository" in err
    assert snapshot(repo) == before


def test_a_changed_repository_or_another_target_is_refused(onnx_path: Path, tmp_path: Path, capsys) -> None:
    repo = deferred(onnx_path, tmp_path / "repo")
    (repo / "yolo_detector/1/build_spec.json").write_text("{}")
    assert main(["plan", str(repo)]) == 1
    assert "the repository changed since it was built (file yolo_detector/1/build_spec.json changed" in \
        capsys.readouterr().err
    other = build_repository(onnx_path, tmp_path / "ort", BuildOptions(target="onnxruntime")).output
    assert main(["plan", str(other)]) == 1
    assert "is a onnxruntime repository; it has no TensorRT plan to build" in capsys.readouterr().err


def test_without_tensorrt_plan_says_what_is_missing(onnx_path: Path, tmp_path: Path, capsys) -> None:
    repo = deferred(onnx_path, tmp_path / "repo")
    before = snapshot(repo)
    assert main(["plan", str(repo)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot build a TensorRT plan on this machine") and err.count("\n") == 1
    assert snapshot(repo) == before
