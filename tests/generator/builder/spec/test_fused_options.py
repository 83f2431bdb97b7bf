"""--fuse-preprocess: the options it combines with, the two-step ensemble Triton will parse, the files beside the
fused model, and what the tools that read a detector config make of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_files, build_repository
from generator.builder.spec.declarations import from_record, to_flags, to_record
from generator.builder.spec.options import BuildOptions, SpecError
from generator.builder.stages.config.render import check_ensemble_wiring, parse_config
from generator.demo import DEMO_ONNX
from generator.serving.contract import IMAGE, LETTERBOX


@pytest.fixture(scope="module")
def gpu_fused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("fused") / "repo"
    build_repository(DEMO_ONNX, output, BuildOptions(preprocess_device="gpu", device="gpu", instances=(1, 3, 1)))  # fused: auto)
    return output


def config(repo: Path, model: str) -> mc.ModelConfig:
    return parse_config(model, (repo / model / "config.pbtxt").read_text())


def test_flag_round_trips_through_the_manifest_record() -> None:
    options = BuildOptions(fuse_preprocess="on")
    assert to_flags(options) == ["--fuse-preprocess", "on"]
    assert from_record(BuildOptions, to_record(options), SpecError) == options


@pytest.mark.parametrize(("kwargs", "fused"), [
    ({"preprocess_device": "gpu", "device": "gpu"}, True),  # where it was measured to win (H100)
    ({}, False),  # the CPU: the three steps
    ({"preprocess_device": "gpu"}, False),  # a CPU detector
    ({"preprocess_device": "gpu", "device": "gpu", "gpu_handoff": "host"}, False),  # separate steps asked for
    ({"preprocess_device": "gpu", "device": "gpu", "target": "onnxruntime"}, False),
    ({"fuse_preprocess": "on"}, True),
    ({"preprocess_device": "gpu", "device": "gpu", "fuse_preprocess": "off"}, False),
])
def test_auto_fuses_the_gpu_preprocess_into_the_embedded_gpu_detector(kwargs: dict[str, str], fused: bool) -> None:
    assert BuildOptions(**kwargs).fused is fused  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"target": "onnxruntime"}, "--target onnxruntime serves it on its own backend"),
    ({"preprocess_device": "gpu", "gpu_handoff": "host"}, "--fuse-preprocess has none"),
    ({"normalise_in": "preprocess"}, "drop --normalise-in preprocess"),
])
def test_combinations_it_cannot_serve_are_refused_by_name(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        BuildOptions(fuse_preprocess="on", **kwargs)  # type: ignore[arg-type]


def test_a_versioned_build_keeps_the_steps_apart_unless_fusing_was_asked_for(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="--fuse-preprocess on builds one unversioned repository"):
        build_files(DEMO_ONNX, tmp_path / "repo", BuildOptions(fuse_preprocess="on"), version=2)
    assert not (tmp_path / "repo").exists()
    built = build_files(DEMO_ONNX, tmp_path / "repo", BuildOptions(preprocess_device="gpu", device="gpu"), version=2)
    assert "yolo_preprocess" in built.models and built.manifest.options["fuse_preprocess"] == "off"


def test_two_steps_the_first_taking_the_encoded_images_on_the_gpu(gpu_fused: Path) -> None:
    assert not (gpu_fused / "yolo_preprocess").exists()
    detector, nms, ensemble = (config(gpu_fused, m) for m in ("yolo_detector", "yolo_nms", "yolo"))
    (image,) = detector.input
    assert (image.name, image.data_type, list(image.dims)) == (IMAGE, mc.TYPE_STRING, [1])
    assert [o.name for o in detector.output][-1] == LETTERBOX
    assert [(g.kind, g.count) for g in detector.instance_group] == [(mc.ModelInstanceGroup.KIND_GPU, 3)]
    params = {k: v.string_value for k, v in detector.parameters.items()}
    # both halves' settings; no hand-off between them
    assert params["preprocess_device"] == params["detector_device"] == "gpu" and "gpu_handoff" not in params
    assert {"onnx_file", "max_image_pixels", "reduced_decode", "provider_check"} <= params.keys()
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["yolo_detector", "yolo_nms"]
    check_ensemble_wiring(ensemble, {c.name: c for c in (detector, nms)})


def test_the_fused_model_runs_the_two_steps_own_code(gpu_fused: Path) -> None:
    folder = gpu_fused / "yolo_detector" / "1"
    package = Path(__file__).parents[4] / "generator" / "serving" / "models"
    assert (folder / "preprocess_step.py").read_bytes() == (package / "preprocess.py").read_bytes()
    assert (folder / "detector_step.py").read_bytes() == (package / "detector.py").read_bytes()
    assert (folder / "model.py").read_bytes() == (package / "detector_fused.py").read_bytes()
    assert (folder / "ensemble_pipeline" / "gpu" / "decode.py").is_file()  # the GPU preprocess half


def test_the_engine_benchmark_reads_the_graphs_input_from_the_served_size(gpu_fused: Path) -> None:
    from loadtest.engine import detector_config

    path, params, dims = detector_config(gpu_fused, "yolo")
    assert path == gpu_fused / "yolo_detector" / "1" / "model.onnx" and dims == []
    assert (params["input_height"], params["input_width"]) == ("640", "640")
