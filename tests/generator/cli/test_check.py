import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, TensorRTOptions
from generator.cli import check, main
from generator.repository.files import hash_repository
from generator.repository.host import machine_facts
from generator.repository.manifest import MANIFEST_NAME, Manifest, PlanFacts, Thresholds
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata
from tests.generator.builder.stages.tensorrt.fake_child import use_fake_child
from tests.generator.builder.stages.tensorrt.fake_libnvinfer import build_libnvinfer, fake_nvidia_smi

PROJECT = Path(__file__).resolve().parents[3]


def write_manifest(root, manifest):
    final = replace(manifest, files=hash_repository(root))
    (root / MANIFEST_NAME).write_text(json.dumps(final.to_json(), indent=2) + "\n")
    return final


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


PLAN = PlanFacts(plan_file="yolo_detector/1/model.plan", tensorrt_version="10.3.0.26", cuda_version="12.6",
                 gpu_name="NVIDIA A100-SXM4-40GB", compute_capability="8.0",
                 triton_image="nvcr.io/nvidia/tritonserver:24.08-py3")


@pytest.mark.skipif(machine_facts().tensorrt_version is not None, reason="TensorRT is present here")
def test_plan_repository_on_a_machine_without_tensorrt(tmp_path, capsys):
    repo = _repository(tmp_path, PLAN)
    assert main(["check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "plan was built with TensorRT 10.3.0 on NVIDIA A100-SXM4-40GB" in err and "--files-only" in err
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


# --- a real TensorRT repository, checked the way the Triton image checks it ---------------------------------


@pytest.fixture(scope="module")
def detector_onnx(tmp_path_factory):
    model = make_detector("v8", metadata=ultralytics_metadata(names=("a", "b")), seed=3)
    return save(model, tmp_path_factory.mktemp("check") / "tiny.onnx")


def _deferred(onnx_path, output, **tensorrt):
    options = BuildOptions(target="tensorrt", tensorrt=TensorRTOptions(defer_plan=True, **tensorrt))
    return build_repository(onnx_path, output, options).output


def test_a_pending_plan_says_exactly_what_to_run(detector_onnx, tmp_path, capsys):
    repo = _deferred(detector_onnx, tmp_path / "repo")
    assert main(["check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0].endswith(f"run: python -m generator plan {repo}")
    assert main(["check", "--files-only", str(repo)]) == 0
    assert f"the TensorRT plan is still to be built: python -m generator plan {repo}" in capsys.readouterr().out


def _triton_image(monkeypatch, tmp_path, version):
    """This machine as the Triton image sees it: libnvinfer on LD_LIBRARY_PATH and a GPU behind nvidia-smi."""
    library = build_libnvinfer(tmp_path / f"tensorrt-{version}", version)
    smi = fake_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(library.parent))
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    return library


def test_check_in_the_triton_image_uses_its_libnvinfer(detector_onnx, tmp_path, monkeypatch, capsys):
    use_fake_child(monkeypatch)  # the plan is "built" with TensorRT 10.3.0 on an H100 (compute capability 9.0)
    repo = _deferred(detector_onnx, tmp_path / "repo", version_compatible=True)
    assert main(["plan", str(repo)]) == 0
    capsys.readouterr()
    library = _triton_image(monkeypatch, tmp_path, 100300)
    assert main(["check", str(repo)]) == 0
    out = capsys.readouterr().out
    assert f"TensorRT (libnvinfer at {library}) and GPU checked" in out
    assert "Triton needs --backend-config=tensorrt,version-compatible=true" in out
    # What an entrypoint starts tritonserver with: the flags alone on stdout.
    assert main(["check", "--server-flags", str(repo)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "--backend-config=tensorrt,version-compatible=true\n"
    assert "files match the manifest" in captured.err
    # A later 10.x library runs the version-compatible plan; an older one does not.
    _triton_image(monkeypatch, tmp_path, 100800)
    assert main(["check", str(repo)]) == 0
    older = _triton_image(monkeypatch, tmp_path, 100200)
    assert main(["check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert f"plan built with TensorRT 10.3.0 but this machine has 10.2.0 (libnvinfer at {older})" in err
    assert f"rebuild the plan with this TensorRT on this GPU: python -m generator plan {repo} --force" in err


def test_a_plain_plan_needs_the_images_exact_tensorrt(detector_onnx, tmp_path, monkeypatch, capsys):
    use_fake_child(monkeypatch)
    repo = _deferred(detector_onnx, tmp_path / "repo")
    assert main(["plan", str(repo)]) == 0
    capsys.readouterr()
    _triton_image(monkeypatch, tmp_path, 100301)
    assert main(["check", str(repo)]) == 1
    captured = capsys.readouterr()
    assert "a plan loads only with the TensorRT that built it (10.3.0), not 10.3.1" in captured.err
    assert "Triton needs" not in captured.out and "Triton needs" not in captured.err
    assert main(["check", "--server-flags", "--files-only", str(repo)]) == 0
    assert capsys.readouterr().out == "\n"  # a plain plan needs no extra flag


def test_check_needs_only_the_standard_library(detector_onnx, tmp_path):
    """The Triton image has none of the project's dependencies: python -S sees the standard library only."""
    repo = _deferred(detector_onnx, tmp_path / "repo")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT)}
    done = subprocess.run([sys.executable, "-S", "-m", "generator", "check", str(repo)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert f"run: python -m generator plan {repo}" in done.stderr and "Traceback" not in done.stderr
    bare = subprocess.run([sys.executable, "-S", "-c", "import onnx"], env=env, capture_output=True, check=False)
    assert bare.returncode != 0  # the check above really ran without third-party packages


@pytest.fixture(scope="module")
def versioned(detector_onnx, tmp_path_factory):
    """Two versions of one ensemble: 1 stable (the alias serves it), 2 a candidate."""
    from generator.builder.versioned import add_version

    repo = tmp_path_factory.mktemp("versioned") / "repo"
    for conf in (0.25, 0.5):
        add_version(detector_onnx, repo, BuildOptions(name="yolo", max_batch=2, conf_threshold=conf, service_ms=10))
    return repo


def test_check_of_a_versioned_repository_needs_only_the_standard_library(versioned):
    """The versioned layout too: every version against its manifest, the alias by the hashes the index recorded."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PROJECT)}
    done = subprocess.run([sys.executable, "-S", "-m", "generator", "check", str(versioned)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "version 1 (stable)" in done.stdout and "version 2 (candidate)" in done.stdout
    assert f"{versioned}: versions 1, 2 match their manifests; the alias 'yolo' serves version 1" in done.stdout
    (versioned / "yolo" / "config.pbtxt").write_bytes((versioned / "yolo" / "config.pbtxt").read_bytes() + b"\n")
    try:
        done = subprocess.run([sys.executable, "-S", "-m", "generator", "check", str(versioned)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        (versioned / "yolo" / "config.pbtxt").write_bytes((versioned / "yolo" / "config.pbtxt").read_bytes()[:-1])
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "mismatch: the alias file yolo/config.pbtxt changed since the index was written" in done.stderr
