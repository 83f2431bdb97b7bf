"""Rendered configs: parsed by Triton's own proto, compared with golden files, wiring cross-checked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jinja2
import pytest
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository, step_parameters
from generator.builder.spec.options import (
    BuildOptions,
    Device,
    ImageLimitOptions,
    Precision,
    Target,
    TensorRTOptions,
)
from generator.builder.stages.admission import build_admission
from generator.builder.stages.config.detector_io import declared_io, detector_io
from generator.builder.stages.config.load_rules import check_ensemble_wiring
from generator.builder.stages.config.render import _environment, parse_config, render_models
from generator.errors import ConfigError
from generator.model.onnx_inspect import DetectorInfo, TensorInfo
from generator.repository.admission_record import ServiceTime
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata

GOLDEN = Path(__file__).parent / "golden"
# Regenerate with UPDATE_GOLDEN=1 after an intended template change, then read the diff.
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EXTRA = step_parameters(BuildOptions(), "output0")


def served(static_batch: int | None = None, names: tuple[str, ...] = ("a", "b"),
           input_dtype: int = TensorProto.UINT8) -> DetectorInfo:
    """A fixed small detector as served: uint8 BGR NHWC 64x64 in, v8 head [N, 6, 64] out."""
    batch: int | str = static_batch if static_batch is not None else "batch"
    return DetectorInfo(
        path=Path("tiny.onnx"),
        input=TensorInfo("images_bgr_u8", input_dtype, (batch, 64, 64, 3)),
        output=TensorInfo("output0", TensorProto.FLOAT, (batch, 4 + len(names), 64)),
        layout="v8",
        num_classes=len(names),
        class_names=names,
        image_size=(64, 64),
        static_batch=static_batch,
        opset=17,
        metadata={},
    )


def with_head(layout: str) -> DetectorInfo:
    """The served detector with each head layout the NMS step decodes."""
    outputs = {"v8": ("output0", (6, 64)), "v8_reduced": ("boxes_score_class", (6, 64)),
               "v5": ("output0", (64, 7)), "end2end": ("output0", (64, 6))}
    name, dims = outputs[layout]
    info = served()
    return DetectorInfo(**{**info.__dict__, "layout": layout,
                           "output": TensorInfo(name, TensorProto.FLOAT, ("batch", *dims))})


def configs(models: dict) -> dict[str, mc.ModelConfig]:
    return {name: r.config for name, r in models.items()}


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file (UPDATE_GOLDEN=1 to regenerate)"


@pytest.mark.parametrize("step", ["yolo", "yolo_preprocess", "yolo_detector", "yolo_nms"])
def test_embedded_golden_configs(step: str) -> None:
    models = render_models(served(), BuildOptions(max_batch=4, max_detections=10), EXTRA)
    assert list(models) == ["yolo", "yolo_preprocess", "yolo_detector", "yolo_nms"]
    assert_golden(f"embedded/{step}.pbtxt", models[step].text)


@pytest.mark.parametrize("layout", ["v8", "v8_reduced", "v5", "end2end"])
def test_nms_golden_per_head_layout(layout: str) -> None:
    info = with_head(layout)
    models = render_models(info, BuildOptions(max_batch=4, max_detections=10),
                           step_parameters(BuildOptions(), info.output.name))
    assert_golden(f"nms_{layout}/yolo_nms.pbtxt", models["yolo_nms"].text)
    assert models["yolo_nms"].config.parameters["layout"].string_value == layout


# Real builds of a small factory detector: the configs Triton will parse for each target, byte for byte.
# The service time is given: measured, it would size the queues differently on every run.
BUILDS: dict[str, tuple[dict[str, Any], BuildOptions]] = {
    "onnxruntime_cpu": ({}, BuildOptions(target="onnxruntime", max_batch=4, max_detections=10, service_ms=100)),
    "onnxruntime_gpu": ({}, BuildOptions(target="onnxruntime", device="gpu", ort_tensorrt=True, precision="fp32",
                                         max_batch=4, max_detections=10, service_ms=100)),
    "onnxruntime_static1": ({"batch": 1}, BuildOptions(target="onnxruntime", max_batch=4, max_detections=10,
                                                       service_ms=100)),
    "tensorrt_deferred": ({}, BuildOptions(target="tensorrt", max_batch=4, max_detections=10, service_ms=100,
                                           tensorrt=TensorRTOptions(defer_plan=True, opt_batch=2))),
    "embedded_gpu": ({}, BuildOptions(device="gpu", preprocess_device="gpu", max_batch=4, max_detections=10,
                                      service_ms=100)),
    "onnxruntime_cuda": ({}, BuildOptions(target="onnxruntime", device="gpu", max_batch=4, max_detections=10,
                                          service_ms=100)),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("golden-builds")
    repositories = {}
    for scenario, (shape, options) in BUILDS.items():
        model = make_detector("v8", metadata=ultralytics_metadata(names=("a", "b")), seed=0, **shape)
        onnx_path = save(model, root / f"{scenario}.onnx")
        repositories[scenario] = build_repository(onnx_path, root / scenario, options).output
    return repositories


@pytest.mark.parametrize(("scenario", "model"), [
    ("onnxruntime_cpu", "yolo_detector"), ("onnxruntime_gpu", "yolo_detector"),
    ("onnxruntime_static1", "yolo_detector"), ("onnxruntime_static1", "yolo"),
    ("tensorrt_deferred", "yolo_detector"), ("embedded_gpu", "yolo_detector"), ("embedded_gpu", "yolo"),
    ("onnxruntime_cuda", "yolo_detector"),
])
def test_built_golden_configs(built: dict[str, Path], scenario: str, model: str) -> None:
    assert_golden(f"{scenario}/{model}.pbtxt", (built[scenario] / model / "config.pbtxt").read_text())


def test_deferred_build_spec_golden(built: dict[str, Path]) -> None:
    assert_golden("tensorrt_deferred/build_spec.json",
                  (built["tensorrt_deferred"] / "yolo_detector" / "1" / "build_spec.json").read_text())


def test_every_golden_parses_with_the_triton_proto() -> None:
    goldens = sorted(GOLDEN.rglob("*.pbtxt"))
    assert len(goldens) == 4 + 4 + 8, [p.relative_to(GOLDEN).as_posix() for p in goldens]
    for path in goldens:
        config = parse_config(path.stem, path.read_text())
        assert config.name == path.stem


@pytest.mark.parametrize("target", ["embedded", "onnxruntime", "tensorrt"])
def test_every_target_parses_with_the_triton_proto(target: Target) -> None:
    models = render_models(served(), BuildOptions(target=target), EXTRA)
    for name, rendered in models.items():
        assert rendered.config.name == name
        # The rendered text is exactly what was parsed: re-parsing gives an equal message.
        assert parse_config(name, rendered.text) == rendered.config
    detector = models["yolo_detector"].config
    assert detector.platform == {"embedded": "", "onnxruntime": "onnxruntime_onnx",
                                 "tensorrt": "tensorrt_plan"}[target]
    assert detector.backend == ("python" if target == "embedded" else "")
    expected_kind = mc.ModelInstanceGroup.KIND_GPU if target == "tensorrt" else mc.ModelInstanceGroup.KIND_CPU
    assert detector.instance_group[0].kind == expected_kind
    # Platform detectors warm up on a real image; the Python steps never run on a GPU.
    assert bool(detector.model_warmup) == (target != "embedded")
    for step in ("yolo_preprocess", "yolo_nms"):
        assert models[step].config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


@pytest.mark.parametrize(("options", "kind"), [
    (BuildOptions(target="onnxruntime"), "KIND_CPU"),
    (BuildOptions(target="onnxruntime", device="cpu"), "KIND_CPU"),
    (BuildOptions(target="onnxruntime", device="gpu"), "KIND_GPU"),
    (BuildOptions(target="tensorrt"), "KIND_GPU"),
    (BuildOptions(target="tensorrt", device="gpu"), "KIND_GPU"),
    (BuildOptions(), "KIND_CPU"),
    (BuildOptions(device="gpu"), "KIND_GPU"),
])
def test_detector_instances_run_on_the_targets_device(options: BuildOptions, kind: str) -> None:
    detector = configs(render_models(served(), options, EXTRA))["yolo_detector"]
    assert mc.ModelInstanceGroup.Kind.Name(detector.instance_group[0].kind) == kind


@pytest.mark.parametrize(("precision", "mode"), [("fp32", "FP32"), ("fp16", "FP16"), ("int8", "INT8")])
def test_ort_tensorrt_accelerator_takes_the_graphs_precision(precision: Precision, mode: str) -> None:
    options = BuildOptions(target="onnxruntime", device="gpu", ort_tensorrt=True, precision=precision,
                           max_batch=6)
    detector = configs(render_models(served(), options, EXTRA))["yolo_detector"]
    accelerator, cuda = detector.optimization.execution_accelerators.gpu_execution_accelerator
    assert cuda.name == "cuda"  # the provider of the nodes TensorRT does not take
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == mode
    assert accelerator.parameters["trt_engine_cache_enable"] == "1"
    assert accelerator.parameters["trt_profile_min_shapes"] == "images_bgr_u8:1x64x64x3"
    assert accelerator.parameters["trt_profile_max_shapes"] == "images_bgr_u8:6x64x64x3"


def test_config_values_follow_the_options() -> None:
    options = BuildOptions(max_batch=16, conf_threshold=0.3, iou_threshold=0.6, max_detections=42,
                           queue_delay_us=1234, max_queue_ms=300, instances=(1, 2, 3), reduced_decode=False)
    service = ServiceTime(batch=16, batch_ms=50.0, source="test")
    models = configs(render_models(served(), options, EXTRA, admission=build_admission(options, service)))
    ensemble, nms, pre = models["yolo"], models["yolo_nms"], models["yolo_preprocess"]
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 16
    assert [list(o.dims) for o in ensemble.output] == [[1], [42, 4], [42], [42]]
    assert nms.parameters["conf_threshold"].string_value == "0.3"
    assert nms.parameters["iou_threshold"].string_value == "0.6"
    assert nms.parameters["layout"].string_value == "v8"
    assert nms.instance_group[0].count == 3
    assert pre.dynamic_batching.max_queue_delay_microseconds == 1234
    # 300 ms / 50 ms per batch of 16 = 96 images served, halved for the steps sharing the cores, less the batch
    # running.
    assert pre.dynamic_batching.default_queue_policy.max_queue_size == 32
    assert pre.dynamic_batching.default_queue_policy.default_timeout_microseconds == 300_000
    assert pre.dynamic_batching.default_queue_policy.timeout_action == mc.ModelQueuePolicy.REJECT
    assert pre.parameters["reduced_decode"].string_value == "false"
    assert list(pre.output[0].dims) == [64, 64, 3] and pre.output[0].data_type == mc.TYPE_UINT8


@pytest.mark.parametrize("target", ["embedded", "onnxruntime", "tensorrt"])
def test_every_step_sheds_overload_and_lets_probes_overtake(target: Target) -> None:
    options = BuildOptions(target=target, max_queue_ms=200)
    admission = build_admission(options, ServiceTime(batch=8, batch_ms=40.0, source="test"))
    models = configs(render_models(served(), options, EXTRA, admission=admission))
    for step in ("yolo_preprocess", "yolo_detector", "yolo_nms"):
        batching = models[step].dynamic_batching
        assert (batching.priority_levels, batching.default_priority_level) == (2, 2)
        policy = batching.default_queue_policy
        assert policy.timeout_action == mc.ModelQueuePolicy.REJECT
        assert policy.default_timeout_microseconds == 200_000
        assert policy.max_queue_size == 12  # 200 / 40 x 8 / 2 - 8
        assert not policy.allow_timeout_override
        probes = batching.priority_queue_policy[1]  # same queue size, never timed out
        assert (probes.max_queue_size, probes.default_timeout_microseconds) == (12, 0)
        assert set(batching.priority_queue_policy) == {1}
    # The ensemble has no scheduler of its own: with dynamic_batching it would reset every priority to 0.
    assert not models["yolo"].HasField("dynamic_batching")


def test_without_a_service_time_the_queues_hold_two_batches() -> None:
    models = configs(render_models(served(), BuildOptions(max_batch=4), EXTRA))
    policy = models["yolo_detector"].dynamic_batching.default_queue_policy
    assert policy.max_queue_size == 8 and policy.default_timeout_microseconds == 250_000


@pytest.mark.parametrize(("limits", "budget"), [
    (ImageLimitOptions(), "250.0"),  # the queue budget
    (ImageLimitOptions(max_decode_ms=80), "80.0"),
    (ImageLimitOptions(max_decode_ms=0), "0.0"),  # switched off
])
def test_preprocess_gets_the_per_image_work_limits(limits: ImageLimitOptions, budget: str) -> None:
    options = BuildOptions(limits=ImageLimitOptions(**{**limits.__dict__, "max_jpeg_scans": 12}))
    pre = configs(render_models(served(), options, EXTRA))["yolo_preprocess"]
    params = {key: value.string_value for key, value in pre.parameters.items()}
    assert params["max_jpeg_scans"] == "12"
    assert params["max_decode_ms"] == budget


def test_normalise_in_preprocess_sends_float_nchw() -> None:
    info = served(input_dtype=TensorProto.FLOAT)
    info = DetectorInfo(**{**info.__dict__, "input": TensorInfo("images", TensorProto.FLOAT, ("batch", 3, 64, 64))})
    models = configs(render_models(info, BuildOptions(normalise_in="preprocess"), EXTRA))
    pre, detector = models["yolo_preprocess"], models["yolo_detector"]
    assert pre.output[0].data_type == mc.TYPE_FP32 and list(pre.output[0].dims) == [3, 64, 64]
    assert pre.parameters["output_dtype"].string_value == "float32"
    assert list(detector.input[0].dims) == [3, 64, 64]


def test_class_names_survive_pbtxt_and_json_escaping() -> None:
    names = ('say "hi"', "back\\slash", "new\nline", "café", "{0: 'x'}")
    models = configs(render_models(served(names=names), BuildOptions(), EXTRA))
    assert json.loads(models["yolo"].parameters["class_names"].string_value) == list(names)


@pytest.mark.parametrize("target", ["embedded", "onnxruntime", "tensorrt"])
@pytest.mark.parametrize("tensor", ['out"put', "a\\x41", "onnx::Concat_7", "model/head:0"])
def test_onnx_tensor_names_reach_the_config_unchanged(target: Target, tensor: str) -> None:
    # ONNX allows any string as a tensor name; pbtxt escapes must not change it ("a\x41" is not "aA").
    info = served()
    info = DetectorInfo(**{**info.__dict__, "output": TensorInfo(tensor, TensorProto.FLOAT, ("batch", 6, 64)),
                           "input": TensorInfo("in\\" + tensor, TensorProto.UINT8, ("batch", 64, 64, 3))})
    models = configs(render_models(info, BuildOptions(target=target), {"nms": {"raw_output": tensor}}))
    assert models["yolo_detector"].output[0].name == tensor
    assert models["yolo_detector"].input[0].name == "in\\" + tensor
    assert target == "embedded" or set(models["yolo_detector"].model_warmup[0].inputs) == {"in\\" + tensor}
    assert models["yolo_nms"].input[0].name == tensor
    assert models["yolo_nms"].parameters["raw_output"].string_value == tensor
    steps = models["yolo"].ensemble_scheduling.step
    assert set(steps[1].input_map) == {"in\\" + tensor} and set(steps[1].output_map) == {tensor}


def test_static_batch_one_on_onnxruntime_does_not_batch_the_detector() -> None:
    # The ONNX Runtime backend refuses max_batch_size > 0 unless the ONNX batch dim is dynamic
    # (onnxruntime_utils.cc CompareDimsSupported): the detector takes full dims and max_batch_size 0.
    models = configs(render_models(served(static_batch=1), BuildOptions(target="onnxruntime", max_batch=8), EXTRA))
    detector = models["yolo_detector"]
    assert detector.max_batch_size == 0
    assert list(detector.input[0].dims) == [1, 64, 64, 3] and list(detector.output[0].dims) == [1, 6, 64]
    assert list(detector.model_warmup[0].inputs["images_bgr_u8"].dims) == [1, 64, 64, 3]
    # One image per ensemble request; preprocess and NMS still batch across requests.
    assert models["yolo"].max_batch_size == 1
    assert models["yolo_preprocess"].max_batch_size == 8 and models["yolo_nms"].max_batch_size == 8
    assert list(models["yolo_preprocess"].output[0].dims) == [64, 64, 3]
    assert list(models["yolo_nms"].input[0].dims) == [6, 64]


def test_static_batch_three_on_onnxruntime_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"fixed batch of 3.*re-export with dynamic=True"):
        render_models(served(static_batch=3), BuildOptions(target="onnxruntime"), EXTRA)


def test_static_batch_on_embedded_keeps_max_batch() -> None:
    # The embedded runner cuts and pads batches to the static size itself.
    io = detector_io(declared_io(served(static_batch=3)), served(static_batch=3), BuildOptions(max_batch=8))
    assert io.max_batch_size == 8 and io.warmup is None
    models = configs(render_models(served(static_batch=3), BuildOptions(max_batch=8), EXTRA))
    assert models["yolo"].max_batch_size == 8


def test_strict_undefined_raises_on_a_missing_variable() -> None:
    template = _environment().get_template("nms.pbtxt.j2")
    with pytest.raises(jinja2.UndefinedError, match="max_detections"):
        template.render(name="x", max_batch_size=1, raw_name="o", raw_dtype="TYPE_FP32", raw_dims=[6, 64],
                        instances=1, instance_kind="KIND_CPU", queue_delay_us=0, queue_timeout_us=0,
                        max_queue_size=0, priority_levels=2, default_priority_level=2, probe_priority_level=1,
                        parameters={}, protos=None, classify=False)


def test_unknown_field_in_a_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="rendered config of 'x' is not a valid Triton ModelConfig"):
        parse_config("x", 'name: "x"\nmax_batch_sise: 4\n')
    with pytest.raises(ConfigError):
        parse_config("x", 'name: "x"\ninstance_group [ { kind: KIND_TPU } ]\n')
    # A field of newer Triton releases (common r25.12+) is unknown to 2.51 and fails its strict parse.
    with pytest.raises(ConfigError):
        parse_config("x", 'name: "x"\nplatform: "ensemble"\nensemble_scheduling { max_inflight_requests: 4 }\n')


# --- the wiring checker on deliberately broken configs --------------------------------------------------


@pytest.fixture
def good() -> tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]:
    models = configs(render_models(served(), BuildOptions(max_batch=4), EXTRA))
    ensemble = models.pop("yolo")
    check_ensemble_wiring(ensemble, models)  # the unbroken ensemble passes
    return ensemble, models


def test_step_mapping_a_tensor_nothing_produces(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    ensemble.ensemble_scheduling.step[2].input_map["LETTERBOX"] = "letterbox_typo"
    with pytest.raises(ConfigError, match="input 'LETTERBOX' reads 'letterbox_typo', which nothing produces"):
        check_ensemble_wiring(ensemble, models)


def test_step_missing_one_of_the_model_inputs(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    del ensemble.ensemble_scheduling.step[2].input_map["LETTERBOX"]
    with pytest.raises(ConfigError, match=r"step 'yolo_nms' maps inputs \['output0'\] but the model has"):
        check_ensemble_wiring(ensemble, models)


def test_step_mapping_an_input_the_model_lacks(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    ensemble.ensemble_scheduling.step[1].input_map["extra"] = "preprocessed"
    with pytest.raises(ConfigError, match="step 'yolo_detector' maps inputs"):
        check_ensemble_wiring(ensemble, models)


def test_step_mapping_an_output_the_model_lacks(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    ensemble.ensemble_scheduling.step[0].output_map["SCALE"] = "scale"
    with pytest.raises(ConfigError, match="maps output 'SCALE', which the model does not have"):
        check_ensemble_wiring(ensemble, models)


def test_dtype_mismatch(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    models["yolo_detector"].input[0].data_type = mc.TYPE_FP32
    with pytest.raises(ConfigError, match=r"'preprocessed' from 'yolo_preprocess' output 'PREPROCESSED' is "
                                          r"TYPE_UINT8 \[64, 64, 3\] but 'yolo_detector' input "
                                          r"'images_bgr_u8' expects TYPE_FP32"):
        check_ensemble_wiring(ensemble, models)


def test_dims_mismatch(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    models["yolo_detector"].input[0].dims[:] = [3, 64, 64]
    with pytest.raises(ConfigError, match=r"expects TYPE_UINT8 \[3, 64, 64\]"):
        check_ensemble_wiring(ensemble, models)


def test_dynamic_dims_agree_with_fixed_ones(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    models["yolo_detector"].input[0].dims[:] = [-1, -1, 3]
    check_ensemble_wiring(ensemble, models)
    models["yolo_detector"].input[0].dims[:] = [-1, -1]
    with pytest.raises(ConfigError, match="expects"):
        check_ensemble_wiring(ensemble, models)


def test_ensemble_output_mismatch(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    ensemble.output[1].dims[:] = [99, 4]
    with pytest.raises(ConfigError, match=r"ensemble output 'detection_boxes' is declared TYPE_FP32 \[99, 4\]"):
        check_ensemble_wiring(ensemble, models)
    ensemble.output[1].dims[:] = [100, 4]
    ensemble.output[1].name = "boxes"
    with pytest.raises(ConfigError, match="ensemble output 'boxes' is not produced by any step"):
        check_ensemble_wiring(ensemble, models)


def test_ensemble_batch_above_a_composing_model(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    models["yolo_nms"].max_batch_size = 2
    with pytest.raises(ConfigError, match="ensemble max_batch_size 4 exceeds 'yolo_nms' max_batch_size 2"):
        check_ensemble_wiring(ensemble, models)


def test_a_non_batching_step_limits_the_ensemble_to_one_image(
        good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    detector = models["yolo_detector"]
    detector.max_batch_size = 0
    detector.input[0].dims[:] = [1, 64, 64, 3]
    detector.output[0].dims[:] = [1, 6, 64]
    # Triton accepts max_batch_size 0 inside a batching ensemble (full dims [1, ...] match [-1, ...]),
    # but a request with two images would reach the detector as [2, ...] and fail.
    with pytest.raises(ConfigError, match="'yolo_detector' does not batch and takes a leading batch of 1; the "
                                          "ensemble must have max_batch_size 1"):
        check_ensemble_wiring(ensemble, models)
    ensemble.max_batch_size = 1
    check_ensemble_wiring(ensemble, models)


def test_unknown_composing_model(good: tuple[mc.ModelConfig, dict[str, mc.ModelConfig]]) -> None:
    ensemble, models = good
    del models["yolo_detector"]
    with pytest.raises(ConfigError, match="uses unknown model 'yolo_detector'"):
        check_ensemble_wiring(ensemble, models)


@pytest.mark.parametrize("target", ["embedded", "onnxruntime"])
def test_both_gpu_detectors_get_the_one_set_of_cuda_settings(target: Target) -> None:
    """The embedded detector reads them from its parameters, Triton's backend from the cuda accelerator and,
    because it resets them from any parameters a config has, the legacy parameters too."""
    from generator.serving.cuda_provider import SETTINGS

    options = BuildOptions(target=target, device="gpu")
    detector = configs(render_models(served(), options, step_parameters(options, "output0")))["yolo_detector"]
    parameters = {k: v.string_value for k, v in detector.parameters.items()}
    if target == "embedded":
        assert parameters["detector_device"] == "gpu" and parameters["FORCE_CPU_ONLY_INPUT_TENSORS"] == "no"
        assert SETTINGS.parameters().items() <= parameters.items()
        assert not detector.optimization.execution_accelerators.gpu_execution_accelerator
    else:
        (cuda,) = detector.optimization.execution_accelerators.gpu_execution_accelerator
        assert cuda.name == "cuda" and dict(cuda.parameters) == SETTINGS.parameters()
        assert parameters == SETTINGS.legacy_parameters()


def test_cpu_detectors_carry_no_cuda_settings() -> None:
    for options in (BuildOptions(), BuildOptions(target="onnxruntime")):
        detector = configs(render_models(served(), options, step_parameters(options, "output0")))["yolo_detector"]
        assert not {"detector_device", "cudnn_conv_algo_search", "FORCE_CPU_ONLY_INPUT_TENSORS"} & set(detector.parameters)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_detector_threads_reach_triton_onnxruntime_backend_as_its_intra_op_thread_count(device: Device) -> None:
    """onnxruntime_backend src/onnxruntime.cc reads the string parameter ``intra_op_thread_count`` (0 or absent:
    ONNX Runtime's default, every physical core of the host per instance's session)."""
    options = BuildOptions(target="onnxruntime", device=device, instances=(1, 4, 1), detector_threads=3)
    detector = configs(render_models(served(), options, step_parameters(options, "output0")))["yolo_detector"]
    assert detector.parameters["intra_op_thread_count"].string_value == "3"
    assert detector.instance_group[0].count == 4


def test_several_cpu_onnxruntime_instances_without_a_thread_count_are_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    quiet = BuildOptions(target="onnxruntime")  # the CPU default: one instance, ONNX Runtime's own thread count
    several = BuildOptions(target="onnxruntime", instances=(1, 4, 1))
    for options in (quiet, several):
        detector = configs(render_models(served(), options, step_parameters(options, "output0")))["yolo_detector"]
        assert "intra_op_thread_count" not in detector.parameters
    assert [r.getMessage() for r in caplog.records] == [
        "4 ONNX Runtime detector instances on the CPU each take every core of the host: pass --detector-threads "
        "(the serving host's cores / 4) so they do not oversubscribe it"]


@pytest.mark.parametrize(("options", "spin"), [
    (BuildOptions(), None), (BuildOptions(detector_spin="run"), "run"), (BuildOptions(detector_spin="alone"), "alone"),
    (BuildOptions(detector_spinning=True), "true")])
def test_the_detector_spin_setting_reaches_the_embedded_detector_config(options: BuildOptions, spin: str | None) -> None:
    detector = configs(render_models(served(), options, step_parameters(options, "output0")))["yolo_detector"]
    parameters = {k: v.string_value for k, v in detector.parameters.items()}
    assert parameters.get("spin_wait") == spin
