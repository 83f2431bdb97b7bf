"""The TensorRT target end to end down to the TensorRT child: profiles, bindings, warmup data and configs.

Only the child process that imports TensorRT is replaced (``fake_child.py``, through the same
``$TRITON_DETECTION_TENSORRT_CHILD`` a site would use); it reads the real build_spec.json and derives the
engine's I/O from the real served ONNX. Everything the build derives runs for real.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, NormaliseIn, TensorRTOptions
from generator.builder.stages.config.load_rules import repository_violations
from generator.builder.stages.graph.nms import NMS_OUTPUT
from generator.builder.stages.graph.prefix import SERVED_INPUT
from generator.builder.stages.graph.suffix import REDUCED_OUTPUT
from generator.errors import GeneratorError
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata
from tests.generator.builder.stages.tensorrt.fake_child import PLAN_MAGIC, use_fake_child

BYTES = {"TYPE_UINT8": 1, "TYPE_FP16": 2, "TYPE_FP32": 4}


@pytest.fixture(autouse=True)
def fake_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_child(monkeypatch)


def config(repo: Path, model: str) -> mc.ModelConfig:
    return text_format.Parse((repo / model / "config.pbtxt").read_text(), mc.ModelConfig())


def detector_model(tmp_path: Path, head: str = "v8", classes: int = 3, **kwargs: Any) -> Path:
    names = tuple("abcdefgh"[:classes])
    extra: dict[str, Any] = {"end2end": "True"} if head == "end2end" else {}
    metadata = ultralytics_metadata(names=names, **extra)
    return save(make_detector(head, num_classes=classes, metadata=metadata, seed=5, **kwargs),
                tmp_path / f"{head}.onnx")


# (input name, dtype, per-image dims, output name, dims) for each served input and head. NMS runs in the graph by
# default on TensorRT (generator.builder.stages.graph.placement): padded [max_det, 6] rows out; --python-nms keeps the head.
DETECTIONS = (NMS_OUTPUT, (100, 6))
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, str, tuple[int, ...]], tuple[str, tuple[int, ...]]]] = {
    "graph, reduced v8 head": ({}, {}, (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)), DETECTIONS),
    "graph, full v8 head": ({}, {"reduce_head": False}, (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)), DETECTIONS),
    "graph, v5 head": ({"head": "v5"}, {}, (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)), DETECTIONS),
    "graph, end2end head": ({"head": "end2end"}, {}, (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)), ("output0", (64, 6))),
    "python nms, reduced v8 head": ({}, {"python_nms": True}, (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)),
                                    (REDUCED_OUTPUT, (6, 64))),
    "python nms, full v8 head": ({}, {"python_nms": True, "reduce_head": False},
                                 (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)), ("output0", (7, 64))),
    "python nms, v5 head": ({"head": "v5"}, {"python_nms": True}, (SERVED_INPUT, "TYPE_UINT8", (64, 64, 3)),
                            ("output0", (64, 8))),
    "preprocess, fp32": ({}, {"normalise_in": "preprocess"}, ("images", "TYPE_FP32", (3, 64, 64)), DETECTIONS),
    "preprocess, fp16 input": ({"input_dtype": TensorProto.FLOAT16}, {"normalise_in": "preprocess"},
                               ("images", "TYPE_FP16", (3, 64, 64)), DETECTIONS),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_inputs_follow_the_served_graph(case: str, tmp_path: Path) -> None:
    model_kwargs, option_kwargs, (in_name, in_type, in_dims), (out_name, out_dims) = CASES[case]
    onnx_path = detector_model(tmp_path, **model_kwargs)
    repo = build_repository(onnx_path, tmp_path / "repo",
                            BuildOptions(target="tensorrt", max_batch=8, **option_kwargs)).output
    version = repo / "yolo_detector" / "1"
    (profile,) = json.loads((version / "build_spec.json").read_text())["profiles"]
    assert profile == {"input": in_name, "min": [1, *in_dims], "opt": [8, *in_dims], "max": [8, *in_dims]}
    detector = config(repo, "yolo_detector")
    assert detector.platform == "tensorrt_plan" and detector.max_batch_size == 8
    assert detector.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    (config_input,), (config_output,) = detector.input, detector.output
    assert (config_input.name, mc.DataType.Name(config_input.data_type), tuple(config_input.dims)) == (
        in_name, in_type, in_dims)
    assert (config_output.name, tuple(config_output.dims)) == (out_name, out_dims)
    # The preprocess step emits exactly what the plan takes; NMS reads what it gives.
    preprocess, nms = config(repo, "yolo_preprocess"), config(repo, "yolo_nms")
    assert (preprocess.output[0].data_type, tuple(preprocess.output[0].dims)) == (config_input.data_type, in_dims)
    assert (nms.input[0].name, tuple(nms.input[0].dims)) == (out_name, out_dims)
    (warmup,) = detector.model_warmup
    sample = warmup.inputs[in_name]
    assert sample.data_type == config_input.data_type and tuple(sample.dims) == in_dims
    data = (repo / "yolo_detector" / "warmup" / sample.input_data_file).read_bytes()
    assert len(data) == math.prod(in_dims) * BYTES[in_type]
    assert (version / "model.plan").read_bytes().startswith(PLAN_MAGIC)


@pytest.mark.parametrize("normalise_in", ["graph", "preprocess"])
def test_warmup_is_a_letterboxed_image_as_the_detector_receives_it(normalise_in: NormaliseIn, tmp_path: Path) -> None:
    repo = build_repository(detector_model(tmp_path), tmp_path / "repo",
                            BuildOptions(target="tensorrt", normalise_in=normalise_in)).output
    data = (repo / "yolo_detector" / "warmup" / "real_image").read_bytes()
    if normalise_in == "graph":
        image: np.ndarray = np.frombuffer(data, np.uint8).reshape(64, 64, 3)
        padding = image[:14]  # a 1280x720 scene letterboxed into 64x64: 14 rows of fill 114 on top
        assert (padding == 114).all() and image[14:50].std() > 0
    else:
        image = np.frombuffer(data, np.float32).reshape(3, 64, 64)
        assert np.allclose(image[:, :14], 114 / 255) and image.max() <= 1.0 and image[:, 14:50].std() > 0


def test_the_served_onnx_next_to_the_plan_is_the_graph_the_plan_was_built_from(tmp_path: Path) -> None:
    repo = build_repository(detector_model(tmp_path), tmp_path / "repo", BuildOptions(target="tensorrt")).output
    served = repo / "yolo_detector" / "1" / "model.onnx"
    model = onnx.load(str(served))
    assert [i.name for i in model.graph.input] == [SERVED_INPUT]
    assert [o.name for o in model.graph.output] == [NMS_OUTPUT]
    images = np.random.default_rng(0).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    (out,) = ort.InferenceSession(str(served)).run(None, {SERVED_INPUT: images})
    assert out.shape == (2, 100, 6)


def test_static_batch_one_export_builds_a_batch_one_plan(tmp_path: Path) -> None:
    onnx_path = detector_model(tmp_path, batch=1)
    repo = build_repository(onnx_path, tmp_path / "repo", BuildOptions(target="tensorrt", max_batch=8)).output
    (profile,) = json.loads((repo / "yolo_detector/1/build_spec.json").read_text())["profiles"]
    assert profile["min"] == profile["opt"] == profile["max"] == [1, 64, 64, 3]
    # The TensorRT backend skips the batch dim (tensorrt_utils.cc CompareDimsSupported): max_batch_size 1.
    assert config(repo, "yolo_detector").max_batch_size == 1
    assert config(repo, "yolo").max_batch_size == 1


def test_manifest_records_the_plan_and_the_build_passes_the_load_rules(tmp_path: Path) -> None:
    options = BuildOptions(target="tensorrt", tensorrt=TensorRTOptions(version_compatible=True,
                                                                       hardware_compatibility="ampere_plus"))
    repo = build_repository(detector_model(tmp_path), tmp_path / "repo", options).output
    manifest = json.loads((repo / "manifest.json").read_text())
    plan = manifest["tensorrt"]
    assert plan["status"] == "built" and plan["tensorrt_version"] == "10.3.0.26"
    assert (plan["gpu_name"], plan["compute_capability"]) == ("NVIDIA H100 80GB HBM3", "9.0")
    assert plan["version_compatible"] is True and plan["hardware_compatibility"] == "ampere_plus"
    spec = json.loads((repo / "yolo_detector/1/build_spec.json").read_text())
    assert spec["version_compatible"] is True and spec["hardware_compatibility"] == "ampere_plus"
    assert {"yolo_detector/1/model.plan", "yolo_detector/1/build_report.json"} <= set(manifest["files"])
    files = {p.relative_to(repo).as_posix(): p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    report = json.loads(files["yolo_detector/1/build_report.json"])
    assert report["plan_path"] == "model.plan"
    from generator.builder.stages.tensorrt.bindings import TensorDesc, engine_io

    engine = engine_io([TensorDesc.from_json(t) for t in report["tensors"]])
    assert repository_violations(files, {"yolo_detector": engine}) == []


def test_reproduce_script_names_no_path_of_the_build_machine(tmp_path: Path) -> None:
    repo = build_repository(detector_model(tmp_path), tmp_path / "repo", BuildOptions(target="tensorrt")).output
    script = (repo / "yolo_detector/1/reproduce_build.sh").read_text()
    assert str(tmp_path) not in script and str(Path.home()) not in script
    assert "-m generator.builder.stages.tensorrt.child --spec build_spec.json --report build_report.json" in script


def test_without_tensorrt_the_build_stops_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from generator.builder.stages.tensorrt.child import CHILD_ENV

    monkeypatch.delenv(CHILD_ENV)
    with pytest.raises(GeneratorError, match="cannot build a TensorRT plan on this machine") as caught:
        build_repository(detector_model(tmp_path), tmp_path / "repo", BuildOptions(target="tensorrt"))
    assert "--target onnxruntime" in str(caught.value) and "--defer-plan" in str(caught.value)
    assert not (tmp_path / "repo").exists()
