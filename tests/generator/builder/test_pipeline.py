"""build_repository on tiny factory models: the written tree, its manifest, and all-or-nothing failures."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository, is_demo
from generator.builder.spec.options import BuildOptions, PrecisionOptions, SpecError
from generator.builder.stages.config.render import check_ensemble_wiring
from generator.builder.stages.graph.prefix import SERVED_INPUT
from generator.builder.stages.graph.suffix import REDUCED_OUTPUT
from generator.demo import DEMO_ONNX
from generator.errors import ConfigError, GeneratorError, ModelInspectionError
from generator.serving.batch import to_float_nchw
from tests.fixtures.onnx_factory import make_bad_rank_model, make_detector, save, ultralytics_metadata
from tests.generator.serving.helpers import reduce_v8

PIPELINE = Path(__file__).resolve().parents[3] / "generator" / "serving"
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
    assert manifest["detector"]["served_layout"] == "v8_reduced" and manifest["detector"]["reduce_head"] is True


def test_configs_on_disk_parse_and_wire_up(embedded_repo: Path) -> None:
    configs = {step: read_config(embedded_repo / step / "config.pbtxt") for step in STEPS}
    ensemble = read_config(embedded_repo / "yolo" / "config.pbtxt")
    check_ensemble_wiring(ensemble, configs)
    assert ensemble.max_batch_size == 4
    assert json.loads(ensemble.parameters["class_names"].string_value) == ["cat", "dog"]
    detector = configs["yolo_detector"]
    assert detector.backend == "python" and detector.parameters["onnx_file"].string_value == "model.onnx"
    # The served graph ends with the class reduction: [N, 6, A] carried as v8_reduced, never re-inferred
    # (this two-class head's own output is [N, 6, A] too).
    nms = configs["yolo_nms"]
    assert nms.parameters["layout"].string_value == "v8_reduced"
    assert nms.parameters["raw_output"].string_value == REDUCED_OUTPUT
    (detector_output,) = detector.output
    assert detector_output.name == REDUCED_OUTPUT and list(detector_output.dims) == [6, 64]
    assert detector_output.data_type == mc.TYPE_FP32
    assert nms.input[0].name == REDUCED_OUTPUT and list(nms.input[0].dims) == [6, 64]


def run_served(repository: Path, images: np.ndarray, name: str = "yolo") -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    path = repository / f"{name}_detector" / "1" / "model.onnx"
    (out,) = ort.InferenceSession(str(path), options).run(None, {SERVED_INPUT: images})
    return out


def run_original(onnx_path: Path, images: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    (out,) = ort.InferenceSession(str(onnx_path), options).run(None, {"images": to_float_nchw(images)})
    return out


def test_served_onnx_is_the_original_between_prefix_and_class_reduction(embedded_repo: Path,
                                                                        onnx_path: Path) -> None:
    served = onnx.load(str(embedded_repo / "yolo_detector" / "1" / "model.onnx"))
    assert [i.name for i in served.graph.input] == [SERVED_INPUT]
    assert [o.name for o in served.graph.output] == [REDUCED_OUTPUT]
    images = np.random.default_rng(0).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    np.testing.assert_array_equal(run_served(embedded_repo, images), reduce_v8(run_original(onnx_path, images)))


def test_no_reduce_head_serves_the_full_head(onnx_path: Path, tmp_path: Path) -> None:
    build_repository(onnx_path, tmp_path / "repo", BuildOptions(reduce_head=False))
    images = np.random.default_rng(1).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    np.testing.assert_array_equal(run_served(tmp_path / "repo", images), run_original(onnx_path, images))
    nms = read_config(tmp_path / "repo" / "yolo_nms" / "config.pbtxt")
    assert nms.parameters["layout"].string_value == "v8"
    assert nms.parameters["raw_output"].string_value == "output0" and nms.input[0].name == "output0"
    detector = read_config(tmp_path / "repo" / "yolo_detector" / "config.pbtxt")
    assert [(o.name, list(o.dims)) for o in detector.output] == [("output0", [6, 64])]
    manifest = json.loads((tmp_path / "repo" / "manifest.json").read_text())["detector"]
    assert manifest["served_layout"] == "v8" and manifest["reduce_head"] is False


@pytest.mark.parametrize("head", ["v5", "end2end"])
def test_other_heads_are_served_as_exported(head: str, tmp_path: Path) -> None:
    extra: dict[str, Any] = {"end2end": "True"} if head == "end2end" else {}
    metadata = ultralytics_metadata(names=("a", "b"), **extra)
    path = save(make_detector(head, metadata=metadata, seed=2), tmp_path / f"{head}.onnx")
    build_repository(path, tmp_path / "repo", BuildOptions())
    images = np.random.default_rng(2).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    np.testing.assert_array_equal(run_served(tmp_path / "repo", images), run_original(path, images))
    nms = read_config(tmp_path / "repo" / "yolo_nms" / "config.pbtxt")
    assert nms.parameters["layout"].string_value == head
    manifest = json.loads((tmp_path / "repo" / "manifest.json").read_text())["detector"]
    assert manifest["layout"] == manifest["served_layout"] == head and manifest["reduce_head"] is False


def test_reduced_head_without_the_normalisation_prefix(tmp_path: Path) -> None:
    path = save(make_detector("v8", num_classes=3, metadata=ultralytics_metadata(names=("a", "b", "c")), seed=4),
                tmp_path / "three.onnx")
    build_repository(path, tmp_path / "repo", BuildOptions(normalise_in="preprocess", target="onnxruntime"))
    detector = read_config(tmp_path / "repo" / "yolo_detector" / "config.pbtxt")
    assert [(o.name, list(o.dims)) for o in detector.output] == [(REDUCED_OUTPUT, [6, 64])]
    assert [(i.name, i.data_type) for i in detector.input] == [("images", mc.TYPE_FP32)]
    ensemble = read_config(tmp_path / "repo" / "yolo" / "config.pbtxt")
    assert json.loads(ensemble.parameters["class_names"].string_value) == ["a", "b", "c"]
    images = np.random.default_rng(3).random((2, 3, 64, 64), dtype=np.float32)
    (got,) = ort.InferenceSession(str(tmp_path / "repo" / "yolo_detector" / "1" / "model.onnx")).run(
        None, {"images": images})
    (full,) = ort.InferenceSession(str(path)).run(None, {"images": images})
    np.testing.assert_array_equal(got, reduce_v8(full))


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


def test_embedded_detector_threads_default_to_host_sizing(embedded_repo: Path, onnx_path: Path,
                                                           tmp_path: Path) -> None:
    # "-1": each of the default two instances sizes its session to every core of the host when it loads.
    config = read_config(embedded_repo / "yolo_detector" / "config.pbtxt")
    assert config.parameters["intra_op_threads"].string_value == "-1" and config.instance_group[0].count == 2
    # "0" with --instances: the host's cores shared by the instances.
    build_repository(onnx_path, tmp_path / "repo", BuildOptions(instances=(1, 3, 1)))
    assert read_config(tmp_path / "repo" / "yolo_detector" / "config.pbtxt").parameters[
        "intra_op_threads"].string_value == "0"


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
    path = save(make_bad_rank_model({"task": "depth"}), tmp_path / "classifier.onnx")
    with pytest.raises(ModelInspectionError, match=r"the ONNX metadata says task 'depth'; the ensemble serves the "
                       r"Ultralytics tasks detect"):
        build_repository(path, tmp_path / "repo", BuildOptions())
    assert list(tmp_path.iterdir()) == [path]


def test_tensorrt_target_without_tensorrt_stops_clearly(onnx_path: Path, tmp_path: Path) -> None:
    with pytest.raises(GeneratorError, match="TensorRT") as caught:
        build_repository(onnx_path, tmp_path / "repo", BuildOptions(target="tensorrt"))
    assert "--target onnxruntime" in str(caught.value)
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize(("options", "fragment"), [
    (BuildOptions(precision="int8"), "--precision int8 needs --calib-images DIR"),
    (BuildOptions(precision="int8", calibration=PrecisionOptions(calib_images=Path("calib"))),
     "pass --validate-images DIR"),
    (BuildOptions(precision="fp16"), "or --no-validate to skip it"),
])
def test_a_users_model_needs_its_own_calibration_and_control_images(
        onnx_path: Path, tmp_path: Path, options: BuildOptions, fragment: str) -> None:
    with pytest.raises(SpecError, match=re.escape(fragment)):
        build_repository(onnx_path, tmp_path / "repo", options)
    assert not (tmp_path / "repo").exists()


def test_the_demo_is_recognised_by_content(tmp_path: Path) -> None:
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(DEMO_ONNX.read_bytes())
    assert is_demo(DEMO_ONNX) and is_demo(copy)
    copy.write_bytes(DEMO_ONNX.read_bytes() + b"\0")
    assert not is_demo(copy)


def test_static_batch_one_export_loads_on_onnxruntime(tmp_path: Path) -> None:
    """Ultralytics' default static export: the ONNX Runtime backend needs a dynamic first dim for batching."""
    from generator.builder.stages.config.load_rules import repository_violations
    from generator.builder.stages.config.model_io import onnxruntime_io

    path = save(make_detector(batch=1, metadata=ultralytics_metadata()), tmp_path / "static1.onnx")
    repo = build_repository(path, tmp_path / "repo", BuildOptions(target="onnxruntime", max_batch=8)).output
    detector = read_config(repo / "yolo_detector" / "config.pbtxt")
    assert detector.max_batch_size == 0 and list(detector.input[0].dims) == [1, 64, 64, 3]
    assert read_config(repo / "yolo" / "config.pbtxt").max_batch_size == 1
    files = files_on_disk(repo)
    io = {"yolo_detector": onnxruntime_io(files["yolo_detector/1/model.onnx"])}
    assert repository_violations(files, io) == []
    # What the build wrote before: max_batch_size 1 with the batch dim left out, which the backend refuses.
    files["yolo_detector/config.pbtxt"] = files["yolo_detector/config.pbtxt"].replace(
        b"max_batch_size: 0", b"max_batch_size: 1").replace(b"[ 1, 64, 64, 3 ]", b"[ 64, 64, 3 ]").replace(
        b"[ 1, 6, 64 ]", b"[ 6, 64 ]")
    messages = [v.message for v in repository_violations(files, io)]
    assert any("for the model to support batching the shape should have at least 1 dimension and the first "
               "dimension must be -1" in m and "yolo export ... dynamic=True" in m for m in messages), messages


def test_onnxruntime_on_a_gpu(onnx_path: Path, tmp_path: Path) -> None:
    options = BuildOptions(target="onnxruntime", device="gpu", ort_tensorrt=True, precision="fp32")
    repo = build_repository(onnx_path, tmp_path / "repo", options).output
    detector = read_config(repo / "yolo_detector" / "config.pbtxt")
    assert detector.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    accelerator, cuda = detector.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and accelerator.parameters["trt_engine_cache_enable"] == "1"
    assert cuda.name == "cuda"
    # The warmup builds (or loads) the provider's engine at load time, on a real image.
    warmup = repo / "yolo_detector" / "warmup" / detector.model_warmup[0].inputs[SERVED_INPUT].input_data_file
    assert warmup.stat().st_size == 64 * 64 * 3
    for step in ("yolo_preprocess", "yolo_nms"):
        assert read_config(repo / step / "config.pbtxt").instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


def test_embedded_on_a_gpu(onnx_path: Path, tmp_path: Path) -> None:
    """KIND_GPU detector instances on the CUDA provider; the manifest says what they import where Triton runs."""
    from generator.serving.gpu.environment import DETECTOR_REQUIREMENTS

    built = build_repository(onnx_path, tmp_path / "repo", BuildOptions(device="gpu"))
    detector = read_config(built.output / "yolo_detector" / "config.pbtxt")
    assert detector.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert detector.parameters["detector_device"].string_value == "gpu"
    for step in ("yolo_preprocess", "yolo_nms"):
        assert read_config(built.output / step / "config.pbtxt").instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    record = built.manifest.detector
    assert record is not None and record.device == "gpu" and record.requirements == DETECTOR_REQUIREMENTS
    assert "--device gpu" in " ".join(built.manifest.rebuild)
    assert built.manifest.admission is not None and built.manifest.admission.service is not None
    service = built.manifest.admission.service
    assert list(service.steps_ms) == ["preprocess"] and "preprocess only" in service.source
    cpu = build_repository(onnx_path, tmp_path / "cpu", BuildOptions()).manifest.detector
    assert cpu is not None and cpu.device == "cpu" and cpu.requirements == ()


def unresolved_head_model() -> onnx.ModelProto:
    """A v5 head reshaped by a shape computed in the graph: the anchors dim is known only when it runs."""
    from onnx import helper, numpy_helper

    model = make_detector("v5", metadata=ultralytics_metadata())
    graph = model.graph
    (last,) = [n for n in graph.node if "output0" in n.output]
    last.output[0] = "head"
    graph.initializer.extend([numpy_helper.from_array(np.array([-1, 7], dtype=np.int64), "tail"),
                              numpy_helper.from_array(np.array([0], dtype=np.int64), "zero")])
    graph.node.extend([
        helper.make_node("Shape", ["head"], ["head_shape"]),
        helper.make_node("Gather", ["head_shape", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "tail"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["head", "new_shape"], ["output0"]),
    ])
    graph.output[0].type.tensor_type.shape.dim[1].Clear()  # neither a value nor a name
    onnx.checker.check_model(model)
    return model


def test_onnxruntime_config_follows_what_onnxruntime_reports(tmp_path: Path) -> None:
    """ONNX Runtime reports the unresolved dim as -1, and the backend compares outputs exactly
    (onnxruntime_utils.cc CompareDimsSupported); the size learnt by running the model would not load."""
    from generator.builder.stages.config.model_io import onnxruntime_io

    path = save(unresolved_head_model(), tmp_path / "unresolved.onnx")
    repo = build_repository(path, tmp_path / "repo", BuildOptions(target="onnxruntime")).output
    reported = onnxruntime_io((repo / "yolo_detector" / "1" / "model.onnx").read_bytes()).outputs[0].shape
    assert reported == (-1, -1, 7)
    detector, nms = (read_config(repo / m / "config.pbtxt") for m in ("yolo_detector", "yolo_nms"))
    assert list(detector.output[0].dims) == [-1, 7] and list(nms.input[0].dims) == [-1, 7]
    # The embedded runner does not care: it keeps the size the build learnt.
    build_repository(path, tmp_path / "embedded", BuildOptions())
    assert list(read_config(tmp_path / "embedded" / "yolo_detector" / "config.pbtxt").output[0].dims) == [64, 7]


def _queue_policy(repo: Path, step: str) -> mc.ModelQueuePolicy:
    return read_config(repo / step / "config.pbtxt").dynamic_batching.default_queue_policy


def test_the_default_budget_is_derived_from_a_slow_service_time_without_a_warning(
        onnx_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A batch of 497 ms (yolov8n at 640, batch 8, 2 cores): the old fixed 250 ms warned and shed a burst."""
    with caplog.at_level("WARNING"):
        built = build_repository(onnx_path, tmp_path / "repo", BuildOptions(service_ms=497.0))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    admission = built.manifest.admission
    assert admission is not None and (admission.budget.source, admission.budget.ms) == ("derived", 2982.0)
    assert "497.0 ms service time" in admission.budget.basis
    for step in ("yolo_preprocess", "yolo_detector", "yolo_nms"):
        policy = _queue_policy(built.output, step)
        assert (policy.default_timeout_microseconds, policy.max_queue_size) == (2_982_000, 16)  # two batches queued behind the one running
    # One image's decode budget stays the floor: a hostile image costs the same whatever the detector costs.
    decode = read_config(built.output / "yolo_preprocess" / "config.pbtxt").parameters["max_decode_ms"]
    assert decode.string_value == "250.0"
    assert "--max-queue-ms" not in built.manifest.rebuild  # a rebuild derives it again where it runs


def test_a_step_of_one_instance_is_named_where_the_batcher_can_strand_a_request(
        onnx_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The default runs two of every step; --instances 1 2 1 (the old default) says which steps run one."""
    with caplog.at_level("WARNING"):
        built = build_repository(onnx_path, tmp_path / "repo", BuildOptions(service_ms=100.0, instances=(1, 2, 1)))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("yolo_nms, yolo_preprocess run one instance")
    assert "500 ms" in warnings[0] and "--instances" in warnings[0]
    assert read_config(built.output / "yolo_preprocess" / "config.pbtxt").instance_group[0].count == 1


def test_an_explicit_budget_is_kept_and_still_warns(onnx_path: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):
        built = build_repository(onnx_path, tmp_path / "repo", BuildOptions(max_queue_ms=250.0, service_ms=497.0))
    assert any("--max-queue-ms 250 is shorter than one full batch" in r.getMessage() for r in caplog.records)
    admission = built.manifest.admission
    assert admission is not None and (admission.budget.source, admission.budget.ms) == ("explicit", 250.0)
    assert _queue_policy(built.output, "yolo_detector").default_timeout_microseconds == 250_000
    assert "--max-queue-ms" in built.manifest.rebuild
    sla = build_repository(onnx_path, tmp_path / "sla", BuildOptions(max_queue_ms=800.0, service_ms=497.0))
    decode = read_config(sla.output / "yolo_preprocess" / "config.pbtxt").parameters["max_decode_ms"]
    assert decode.string_value == "800.0"  # an explicit budget is the decode budget too, as before
