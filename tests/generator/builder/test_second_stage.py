"""``build --classifier``: what it refuses (one line each) and what it writes; served:
tests/integration/test_two_stage.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_files, build_repository
from generator.builder.spec.options import BuildOptions, SpecError
from generator.cli.build import add_arguments, options_from_args
from generator.serving.contract import CLASSIFIER_NAMES_PARAMETER, TWO_STAGE_OUTPUTS
from tests.fixtures import ultralytics as fixtures


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("onnx")
    for key in ("yolo11-static", "classify-dynamic", "pose-static"):
        fixtures.write(key, directory)
    return directory


def _config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def test_the_flag_builds_one_ensemble_with_the_crop_and_classifier_steps(onnx_dir: Path, tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--name", "two", "--classifier", str(onnx_dir / "classify-dynamic.onnx"),
                              "--classify-boxes", "7", "--top-k", "3", "--service-ms", "50"])
    result = build_repository(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", options_from_args(args))
    assert result.models == ("two", "two_preprocess", "two_detector", "two_nms", "two_crop", "two_classifier")
    ensemble = _config(tmp_path / "repo" / "two" / "config.pbtxt")
    assert [o.name for o in ensemble.output] == list(TWO_STAGE_OUTPUTS)
    assert [list(o.dims) for o in ensemble.output[-2:]] == [[7, 3], [7, 3]]
    assert [s.model_name for s in ensemble.ensemble_scheduling.step][-2:] == ["two_crop", "two_classifier"]
    names = ensemble.parameters[CLASSIFIER_NAMES_PARAMETER].string_value
    assert names.startswith('["0", "1"')  # the fixture's metadata names are its indices
    classifier = _config(tmp_path / "repo" / "two_classifier" / "config.pbtxt")
    assert classifier.dynamic_batching.priority_levels == 2 and classifier.instance_group[0].count == 2
    crop = _config(tmp_path / "repo" / "two_crop" / "config.pbtxt")
    assert list(crop.output[0].dims) == [7, 320, 320, 3]  # the classifier's own imgsz (metadata)
    assert (tmp_path / "repo" / "two_classifier" / "1" / "model.onnx").is_file()
    assert "--classifier" in result.manifest.rebuild


def test_a_classifier_that_is_no_classify_export_is_refused(onnx_dir: Path, tmp_path: Path) -> None:
    options = BuildOptions(classifier=onnx_dir / "yolo11-static.onnx")
    with pytest.raises(SpecError, match=r"^--classifier yolo11-static\.onnx: its Ultralytics metadata says task "
                                        r"'detect'; the second stage needs a classify export"):
        build_files(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", options)


def test_a_detector_that_is_no_detection_export_is_refused(onnx_dir: Path, tmp_path: Path) -> None:
    options = BuildOptions(classifier=onnx_dir / "classify-dynamic.onnx")
    with pytest.raises(SpecError, match=r"classifies the boxes of a detection export; pose-static\.onnx is an "
                                        r"Ultralytics 'pose' export"):
        build_files(onnx_dir / "pose-static.onnx", tmp_path / "repo", options)


@pytest.mark.parametrize(("changes", "message"), [
    ({"normalise_in": "preprocess"}, "drop --normalise-in preprocess"),
])
def test_what_the_second_stage_does_not_serve_yet_is_refused(changes: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        BuildOptions(classifier=Path("cls.onnx"), **changes)  # type: ignore[arg-type]


def test_a_versioned_two_stage_build_is_refused(onnx_dir: Path, tmp_path: Path) -> None:
    options = BuildOptions(classifier=onnx_dir / "classify-dynamic.onnx")
    with pytest.raises(SpecError, match="unversioned"):
        build_files(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", options, version=2)


def test_the_cap_is_at_most_max_detections() -> None:
    assert BuildOptions(classifier=Path("c.onnx"), max_detections=5).second_stage_boxes == 5
    assert BuildOptions(classifier=Path("c.onnx")).second_stage_boxes == 20
