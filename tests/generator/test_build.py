"""build_repository on tiny factory models: the written tree, its manifest, and all-or-nothing failures."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.build import build_repository
from generator.errors import ConfigError, GeneratorError, ModelInspectionError
from generator.graph_prefix import SERVED_INPUT
from generator.pipeline.batch import to_float_nchw
from generator.render import check_ensemble_wiring
from generator.spec import BuildOptions
from tests.generator.onnx_factory import make_bad_rank_model, make_detector, save, ultralytics_metadata

PIPELINE = Path(__file__).resolve().parents[2] / "generator" / "pipeline"
STEPS = ("yolo_preprocess", "yolo_detector", "yolo_nms")


def files_on_disk(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def read_config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = make_detector("v8", metadata=ultralytics_metadata(names=("cat", "dog")), seed=9)
    return save(model, tmp_path_factory.mktemp("build") / "tiny.onnx")


@pytest.fixture(scope="module")
def embedded_repo(onnx_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("out") / "repo"
    result = build_repository(onnx_path, output, BuildOptions(max_batch=4, max_detections=20))
    assert result.output == output
    assert set(result.models) == {"yolo", *STEPS}
    assert result.info.class_names == ("cat", "dog")
    return output


def test_expected_tree(embedded_repo: Path) -> None:
    files = files_on_disk(embedded_repo)
    pipeline_sources = sorted(p.name for p in PIPELINE.glob("*.py"))
    expected = {"manifest.json", "yolo/config.pbtxt", "yolo/1/.keep", "yolo_detector/1/model.onnx"}
    for step in STEPS:
        expected |= {f"{step}/config.pbtxt", f"{step}/1/model.py", f"{step}/1/ensemble_common.py"}
        expected |= {f"{step}/1/ensemble_pipeline/{name}" for name in pipeline_sources}
    assert set(files) == expected
    for step in STEPS:  # the pure pipeline package is copied byte for byte
        for name in pipeline_sources:
            assert files[f"{step}/1/ensemble_pipeline/{name}"] == (PIPELINE / name).read_bytes()


def test_manifest_hashes_match_the_written_files(embedded_repo: Path, onnx_path: Path) -> None:
    manifest = json.loads((embedded_repo / "manifest.json").read_text())
    on_disk = files_on_disk(embedded_repo)
    del on_disk["manifest.json"]
    assert set(manifest["files"]) == set(on_disk)
    for path, content in on_disk.items():
        assert manifest["files"][path] == hashlib.sha256(content).hexdigest(), path
    assert manifest["source_onnx"]["sha256"] == hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    assert manifest["name"] == "yolo" and manifest["target"] == "embedded" and manifest["precision"] == "fp32"
    assert manifest["thresholds"] == {"conf": 0.25, "iou": 0.45, "max_detections": 20}
    assert manifest["detector"]["layout"] == "v8" and manifest["detector"]["class_names"] == ["cat", "dog"]


def test_configs_on_disk_parse_and_wire_up(embedded_repo: Path) -> None:
    configs = {step: read_config(embedded_repo / step / "config.pbtxt") for step in STEPS}
    ensemble = read_config(embedded_repo / "yolo" / "config.pbtxt")
    check_ensemble_wiring(ensemble, configs)
    assert ensemble.max_batch_size == 4
    assert json.loads(ensemble.parameters["class_names"].string_value) == ["cat", "dog"]
    detector = configs["yolo_detector"]
    assert detector.backend == "python" and detector.parameters["onnx_file"].string_value == "model.onnx"
    assert configs["yolo_nms"].parameters["layout"].string_value == "v8"


def test_served_onnx_is_the_original_behind_the_normalisation_prefix(embedded_repo: Path, onnx_path: Path) -> None:
    served = onnx.load(str(embedded_repo / "yolo_detector" / "1" / "model.onnx"))
    assert [i.name for i in served.graph.input] == [SERVED_INPUT]
    images = np.random.default_rng(0).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    (got,) = ort.InferenceSession(served.SerializeToString(), options).run(None, {SERVED_INPUT: images})
    (expected,) = ort.InferenceSession(str(onnx_path), options).run(None, {"images": to_float_nchw(images)})
    np.testing.assert_array_equal(got, expected)


def test_copied_pipeline_imports_on_its_own(embedded_repo: Path) -> None:
    # model.py does "from ensemble_pipeline.nms import ..." with only its version folder on the path.
    version = embedded_repo / "yolo_nms" / "1"
    code = "import ensemble_pipeline.nms, ensemble_pipeline.batch, ensemble_pipeline.runner, sys; " \
           "assert 'generator' not in sys.modules, 'imports the generator package'"
    done = subprocess.run([sys.executable, "-c", code], cwd=version, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(version), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr


def test_onnxruntime_target_has_no_python_detector(onnx_path: Path, tmp_path: Path) -> None:
    build_repository(onnx_path, tmp_path / "repo", BuildOptions(target="onnxruntime", name="det"))
    files = files_on_disk(tmp_path / "repo")
    assert "det_detector/1/model.onnx" in files and "det_detector/1/model.py" not in files
    assert not any(p.startswith("det_detector/1/ensemble_pipeline/") for p in files)
    detector = read_config(tmp_path / "repo" / "det_detector" / "config.pbtxt")
    assert detector.platform == "onnxruntime_onnx" and not detector.parameters
    assert read_config(tmp_path / "repo" / "det" / "config.pbtxt").name == "det"


def test_rebuild_replaces_a_previous_build(onnx_path: Path, tmp_path: Path) -> None:
    output = tmp_path / "repo"
    build_repository(onnx_path, output, BuildOptions(name="first"))
    build_repository(onnx_path, output, BuildOptions(name="second"))
    assert sorted(p.name for p in output.iterdir()) == [
        "manifest.json", "second", "second_detector", "second_nms", "second_preprocess"]


def test_static_batch_three_on_onnxruntime_writes_nothing(tmp_path: Path) -> None:
    path = save(make_detector(batch=3), tmp_path / "static3.onnx")
    with pytest.raises(ConfigError, match="fixed batch of 3"):
        build_repository(path, tmp_path / "repo", BuildOptions(target="onnxruntime"))
    assert not (tmp_path / "repo").exists()
    # The embedded target runs it by chunking, so it builds.
    build_repository(path, tmp_path / "repo", BuildOptions())
    assert read_config(tmp_path / "repo" / "yolo_detector" / "config.pbtxt").max_batch_size == 8


def test_unsupported_model_writes_nothing(tmp_path: Path) -> None:
    path = save(make_bad_rank_model(), tmp_path / "classifier.onnx")
    with pytest.raises(ModelInspectionError, match="expected a 3-D detection head"):
        build_repository(path, tmp_path / "repo", BuildOptions())
    assert list(tmp_path.iterdir()) == [path]


def test_tensorrt_target_without_tensorrt_stops_clearly(onnx_path: Path, tmp_path: Path) -> None:
    with pytest.raises(GeneratorError, match="TensorRT") as caught:
        build_repository(onnx_path, tmp_path / "repo", BuildOptions(target="tensorrt"))
    assert "--target onnxruntime" in str(caught.value)
    assert not (tmp_path / "repo").exists()


def test_reduced_precision_without_a_transform_is_refused(onnx_path: Path, tmp_path: Path) -> None:
    with pytest.raises(GeneratorError, match="--precision fp16 is not available"):
        build_repository(onnx_path, tmp_path / "repo", BuildOptions(precision="fp16"))
    assert not (tmp_path / "repo").exists()
