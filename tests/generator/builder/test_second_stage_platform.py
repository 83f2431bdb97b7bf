"""``build --classifier`` for the NGC containers' backends: the classifier step as an ``onnxruntime_onnx`` model or a
``tensorrt_plan`` (DESIGN.md "Targets": verified here without Triton's native backends, TensorRT or a GPU).

Each build passes the load rules of Triton 2.51 (generator.builder.stages.config.load_rules: the config against
what an ONNX Runtime session reports for the served graph, or against the engine the build spec makes). The served
graph, run in ONNX Runtime on the crops the crop step cuts, gives exactly the classes and scores the embedded build's
classifier step computes on the same crops (its ONNX, OnnxRunner and top_classes, as models/classifier.py runs them),
rows past each image's crop count zero, in FP32 and FP16: the ONNX Runtime graph, which classifies the real crops
only, and the TensorRT plan's source graph, which classifies every row. The TensorRT stand-in child (fake_child.py) completes a
deferred build.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_files, build_repository
from generator.builder.spec.options import BuildOptions, GateOptions, SpecError, TensorRTOptions
from generator.builder.stages.tensorrt.builder import BuildSpec
from generator.builder.stages.tensorrt.plan_request import spec_problems
from generator.cli import main
from generator.serving.contract import BOX_CLASSES, BOX_SCORES, CROP_COUNT, CROPS, TOP_CLASSES, TOP_SCORES
from generator.serving.runner import OnnxRunner
from generator.serving.tasks import top_classes
from generator.serving.two_stage import crop_boxes
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import scene_images
from tests.generator.builder.stages.tensorrt.fake_child import use_fake_child

BOXES, TOP_K, SERVICE_MS = 6, 3, 50.0  # service time given: no timing run in these builds


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("onnx")
    for key in ("yolo11-static", "classify-dynamic", "classify-static"):
        fixtures.write(key, directory)
    return directory


def _options(onnx_dir: Path, target: str, **changes: object) -> BuildOptions:
    values = {"name": "two", "target": target, "classifier": onnx_dir / "classify-dynamic.onnx",
              "classify_boxes": BOXES, "top_k": TOP_K, "service_ms": SERVICE_MS, **changes}
    return BuildOptions(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def repositories(onnx_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("two-stage-platform")
    detector = onnx_dir / "yolo11-static.onnx"
    # FP16 served as asked (no gate: random weights have no accuracy to keep; the classify gate is tested apart)
    fp16 = {"precision": "fp16", "gate": GateOptions(enabled=False, speed_gate="off")}
    builds = {"embedded": _options(onnx_dir, "embedded"), "onnxruntime": _options(onnx_dir, "onnxruntime"),
              "tensorrt": _options(onnx_dir, "tensorrt", tensorrt=TensorRTOptions(defer_plan=True)),
              "embedded-fp16": _options(onnx_dir, "embedded", **fp16),
              "onnxruntime-fp16": _options(onnx_dir, "onnxruntime", **fp16)}
    return {target: build_repository(detector, root / target, options).output for target, options in builds.items()}


def _config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def _crops() -> tuple[np.ndarray, np.ndarray]:
    """The crop step's tensors for three scenes: no box, two boxes, more boxes than the cap (BGR, as decoded)."""
    rng = np.random.default_rng(3)
    crops, counts = [], []
    for image, boxes in zip(scene_images()[:3], (0, 2, BOXES + 3), strict=True):
        height, width = image.shape[:2]
        corners = np.sort(rng.uniform(0, [width, height, width, height], (boxes, 4)).reshape(boxes, 2, 2), axis=1)
        batch = crop_boxes(np.ascontiguousarray(image[..., ::-1]), corners.reshape(boxes, 4), 320, BOXES)
        crops.append(batch.crops)
        counts.append([batch.count])
    return np.stack(crops), np.array(counts, dtype=np.int32)


def _embedded(repo: Path, crops: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What the embedded classifier step returns for these crops: only the real ones run, the rest stay zero."""
    runner = OnnxRunner(str(repo / "two_classifier" / "1" / "model.onnx"), 1)
    real = np.arange(BOXES)[None, :] < counts
    classes = np.zeros((len(crops), BOXES, TOP_K), np.int32)
    scores = np.zeros((len(crops), BOXES, TOP_K), np.float32)
    best = top_classes(runner.run(np.ascontiguousarray(crops[real]))[0], TOP_K)
    classes[real], scores[real] = best[TOP_CLASSES], best[TOP_SCORES]
    return classes, scores


@pytest.mark.parametrize(("target", "embedded"), [("onnxruntime", "embedded"), ("tensorrt", "embedded"),
                                                  ("onnxruntime-fp16", "embedded-fp16")])
def test_the_platform_classifier_gives_exactly_the_embedded_steps_classes_and_scores(
        repositories: dict[str, Path], target: str, embedded: str) -> None:
    crops, counts = _crops()
    assert counts.reshape(-1).tolist() == [0, 2, BOXES]
    served = ort.InferenceSession(str(repositories[target] / "two_classifier" / "1" / "model.onnx"),
                                  providers=["CPUExecutionProvider"])
    classes, scores = served.run([BOX_CLASSES, BOX_SCORES], {CROPS: crops, CROP_COUNT: counts})
    expected_classes, expected_scores = _embedded(repositories[embedded], crops, counts)
    assert classes.dtype == np.int32 and scores.dtype == np.float32
    np.testing.assert_array_equal(classes, expected_classes)
    np.testing.assert_array_equal(scores, expected_scores)
    assert not scores[0].any() and not scores[1, 2:].any() and scores[2].all()
    # a batch without a single crop (the ONNX Runtime graph gathers none of them)
    empty = served.run([BOX_CLASSES, BOX_SCORES], {CROPS: crops[:1], CROP_COUNT: counts[:1]})
    assert [a.shape for a in empty] == [(1, BOXES, TOP_K)] * 2 and not any(a.any() for a in empty)


def test_the_classifier_step_is_the_targets_platform_model_batched_by_triton(repositories: dict[str, Path]) -> None:
    embedded = _config(repositories["embedded"] / "two_classifier" / "config.pbtxt")
    for target, platform in (("onnxruntime", "onnxruntime_onnx"), ("tensorrt", "tensorrt_plan")):
        config = _config(repositories[target] / "two_classifier" / "config.pbtxt")
        assert config.platform == platform and not config.backend
        assert config.max_batch_size == 8 and config.HasField("dynamic_batching")
        # the same I/O as the embedded step: the ensemble and its outputs are unchanged
        assert list(config.input) == list(embedded.input) and list(config.output) == list(embedded.output)
        ensemble, same = (_config(repositories[name] / "two" / "config.pbtxt") for name in (target, "embedded"))
        assert list(ensemble.output) == list(same.output)
        assert list(ensemble.ensemble_scheduling.step)[-2:] == list(same.ensemble_scheduling.step)[-2:]
    assert _config(repositories["tensorrt"] / "two_classifier" / "config.pbtxt").instance_group[0].kind == \
        mc.ModelInstanceGroup.KIND_GPU


def test_the_deferred_tensorrt_classifier_has_one_profile_over_both_inputs(repositories: dict[str, Path]) -> None:
    folder = repositories["tensorrt"] / "two_classifier" / "1"
    spec = BuildSpec.from_json(json.loads((folder / "build_spec.json").read_text()))
    assert [(p.input_name, p.min, p.max) for p in spec.profiles] == [
        (CROPS, (1, BOXES, 320, 320, 3), (8, BOXES, 320, 320, 3)), (CROP_COUNT, (1, 1), (8, 1))]
    assert spec_problems(spec, onnx.load(str(folder / "model.onnx"))) == []
    assert not (folder / "model.plan").exists() and (folder / "reproduce_build.sh").is_file()


def test_generator_plan_builds_the_classifiers_plan_after_the_detectors(
        onnx_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    use_fake_child(monkeypatch)
    options = _options(onnx_dir, "tensorrt", tensorrt=TensorRTOptions(defer_plan=True))
    repo = build_repository(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", options).output
    assert main(["plan", str(repo)]) == 0
    assert (repo / "two_detector" / "1" / "model.plan").is_file()
    assert (repo / "two_classifier" / "1" / "model.plan").is_file()
    report = json.loads((repo / "two_classifier" / "1" / "build_report.json").read_text())
    assert [t["name"] for t in report["tensors"]] == [CROPS, CROP_COUNT, BOX_CLASSES, BOX_SCORES]
    capsys.readouterr()


def test_a_static_batch_classifier_is_refused_for_the_platform_step(onnx_dir: Path, tmp_path: Path) -> None:
    options = _options(onnx_dir, "onnxruntime", classifier=onnx_dir / "classify-static.onnx")
    with pytest.raises(SpecError, match=r"^--classifier classify-static\.onnx has a fixed batch of 1; .* re-export "
                                        r"it with dynamic=True"):
        build_files(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", options)


def test_a_tensorrt_build_on_a_gpu_host_builds_both_plans(onnx_dir: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_child(monkeypatch)
    repo = build_repository(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", _options(onnx_dir, "tensorrt")).output
    for step in ("two_detector", "two_classifier"):
        assert (repo / step / "1" / "model.plan").is_file() and (repo / step / "1" / "build_report.json").is_file()
    assert json.loads((repo / "manifest.json").read_text())["tensorrt"]["status"] == "built"


def test_the_gpu_onnxruntime_classifier_runs_on_the_cuda_provider(onnx_dir: Path, tmp_path: Path) -> None:
    options = _options(onnx_dir, "onnxruntime", device="gpu")
    repo = build_repository(onnx_dir / "yolo11-static.onnx", tmp_path / "repo", options).output
    config = _config(repo / "two_classifier" / "config.pbtxt")
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "cuda"
    detector = _config(repo / "two_detector" / "config.pbtxt")
    assert config.optimization == detector.optimization and config.parameters == detector.parameters
