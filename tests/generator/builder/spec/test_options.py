"""BuildOptions and model names: invalid values fail at construction with a message naming the option."""

from __future__ import annotations

import pytest

from generator.builder.spec.options import BuildOptions, ImageLimitOptions, SpecError, validate_model_name
from generator.errors import GeneratorError
from generator.serving.contract import OPENCV_PIXEL_LIMIT


@pytest.mark.parametrize("name", ["yolo", "Y", "yolo11n_coco-v2", "a" * 64, "x-1_2"])
def test_valid_names(name: str) -> None:
    assert validate_model_name(name) == name


@pytest.mark.parametrize("name", [
    "", "../x", "a/b", "..", "yo lo", 'yo"lo', "yo'lo", "a" * 65, "1yolo", "_yolo", "-yolo", "yolo\n",
    "yolo\nname: \"evil\"", "yolo.onnx", "yölo", "\tyolo",
])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(SpecError, match="invalid --name"):
        validate_model_name(name)
    with pytest.raises(SpecError):
        BuildOptions(name=name)


def test_spec_error_is_a_generator_error() -> None:
    assert issubclass(SpecError, GeneratorError)


def test_defaults_and_model_names() -> None:
    options = BuildOptions()
    assert (options.name, options.target, options.precision) == ("yolo", "embedded", "fp32")
    assert options.model_names == {"preprocess": "yolo_preprocess", "detector": "yolo_detector",
                                   "nms": "yolo_nms"}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("target", "tensorrt8", "unknown --target 'tensorrt8'"),
    ("precision", "int4", "unknown --precision 'int4'"),
    ("max_batch", 0, "--max-batch must be between 1 and 1024"),
    ("max_batch", 2.5, "--max-batch must be an integer"),
    ("max_batch", 1025, "--max-batch"),
    ("conf_threshold", -0.01, "--conf-threshold must be in"),
    ("conf_threshold", 1.0, "--conf-threshold"),
    ("conf_threshold", float("nan"), "--conf-threshold"),
    ("iou_threshold", 0.0, "--iou-threshold must be in"),
    ("iou_threshold", 1.01, "--iou-threshold"),
    ("iou_threshold", float("nan"), "--iou-threshold"),
    ("max_detections", 0, "--max-detections must be between 1 and 10000"),
    ("max_detections", 10001, "--max-detections"),
    ("image_size", (31, 640), "--imgsz must be between 32 and 8192"),
    ("image_size", (640, 8193), "--imgsz"),
    ("instances", (0, 2, 1), "--instances must be between 1 and 64"),
    ("instances", (1, 65, 1), "--instances"),
    ("instances", (1, 2), "--instances takes 3 values"),
    ("normalise_in", "cpu", "unknown --normalise-in 'cpu'; choose one of graph, preprocess"),
    ("detector_threads", -1, "--detector-threads must be between 0"),
    ("queue_delay_us", -1, "--queue-delay-us must be between 0"),
    ("max_queue_ms", 0.5, "--max-queue-ms must be between 1 and 600000"),
    ("max_queue_ms", float("nan"), "--max-queue-ms"),
    ("service_ms", 0.0, "--service-ms must be in (0, 600000]"),
])
def test_out_of_range_options_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        BuildOptions(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [
    ("max_batch", 1), ("max_batch", 1024), ("conf_threshold", 0.0), ("conf_threshold", 0.999),
    ("iou_threshold", 1.0), ("max_detections", 1), ("max_detections", 10000), ("image_size", (32, 8192)),
    ("target", "onnxruntime"), ("target", "tensorrt"), ("precision", "fp16"), ("precision", "int8"),
    ("detector_threads", 0), ("detector_threads", 1024), ("max_queue_ms", 1.0), ("service_ms", None),
    ("service_ms", 0.1),
])
def test_boundary_values_are_accepted(field: str, value: object) -> None:
    assert getattr(BuildOptions(**{field: value}), field) == value  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["max_bytes", "max_side"])
def test_image_limits_must_be_positive(key: str) -> None:
    with pytest.raises(SpecError, match=r"--max-image-.* must be in \[1, inf\), got 0"):
        ImageLimitOptions(**{key: 0})


def test_pixel_limit_stays_under_the_opencv_backstop() -> None:
    with pytest.raises(SpecError, match="--max-image-pixels must be between 1 and 268435456, got 0"):
        ImageLimitOptions(max_pixels=0)
    with pytest.raises(SpecError, match="--max-image-pixels must be between 1 and 268435456"):
        ImageLimitOptions(max_pixels=OPENCV_PIXEL_LIMIT + 1)
    assert ImageLimitOptions(max_pixels=OPENCV_PIXEL_LIMIT).max_pixels == OPENCV_PIXEL_LIMIT


@pytest.mark.parametrize(("key", "value", "message"), [
    ("max_jpeg_scans", 0, "--max-jpeg-scans must be between 1 and 10000"),
    ("max_decode_ms", -1.0, "--max-decode-ms must be between 0 and 600000"),
])
def test_work_limits_are_checked(key: str, value: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ImageLimitOptions(**{key: value})  # type: ignore[arg-type]
    assert ImageLimitOptions(max_decode_ms=0.0).max_decode_ms == 0.0  # 0: no decode budget


def test_options_are_frozen() -> None:
    options = BuildOptions()
    with pytest.raises(AttributeError):
        options.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"target": "tensorrt", "device": "cpu"}, "--target tensorrt runs on the GPU only"),
    ({"target": "onnxruntime", "ort_tensorrt": True}, "--ort-tensorrt is ONNX Runtime's TensorRT execution provider"),
    ({"target": "tensorrt", "ort_tensorrt": True}, "use it with --target onnxruntime --device gpu"),
    ({"target": "onnxruntime", "device": "tpu"}, "unknown --device 'tpu'; choose one of cpu, gpu"),
])
def test_devices_each_target_can_use(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        BuildOptions(**kwargs)  # type: ignore[arg-type]


def test_every_target_but_tensorrt_runs_its_detector_on_the_cpu_unless_asked() -> None:
    assert BuildOptions().detector_device == "cpu"
    assert BuildOptions(device="gpu").detector_device == "gpu"  # embedded: ONNX Runtime's CUDA provider
    assert BuildOptions(target="onnxruntime", device="gpu").detector_device == "gpu"
    assert BuildOptions(target="tensorrt").detector_device == "gpu"


def test_defer_plan_is_for_the_tensorrt_target() -> None:
    from generator.builder.spec.options import TensorRTOptions

    with pytest.raises(SpecError, match="--defer-plan leaves the TensorRT plan to build later"):
        BuildOptions(target="onnxruntime", tensorrt=TensorRTOptions(defer_plan=True))
    assert BuildOptions(target="tensorrt", tensorrt=TensorRTOptions(defer_plan=True)).tensorrt.defer_plan


@pytest.mark.parametrize(("kwargs", "device"), [
    ({}, "cpu"), ({"target": "onnxruntime"}, "cpu"), ({"target": "onnxruntime", "device": "gpu"}, "gpu"),
    ({"target": "tensorrt"}, "gpu"), ({"target": "tensorrt", "device": "gpu"}, "gpu"),
])
def test_the_detector_device_defaults_to_the_targets(kwargs: dict[str, object], device: str) -> None:
    assert BuildOptions(**kwargs).detector_device == device  # type: ignore[arg-type]


@pytest.mark.parametrize(("options", "counts"), [
    # Two of every step: two CPU sessions of every core each (a lone request gets the whole machine), and no
    # Python step of one instance, behind which Triton's batcher can strand a request (config/stranding.py).
    (BuildOptions(), (2, 2, 2)),
    (BuildOptions(target="onnxruntime"), (2, 1, 2)),
    (BuildOptions(device="gpu"), (2, 2, 2)),  # on a GPU one instance's copies overlap the other's compute
    (BuildOptions(target="tensorrt"), (2, 2, 2)),
    (BuildOptions(instances=(2, 3, 4)), (2, 3, 4)),
])
def test_instance_counts_default_to_the_detectors_device(options: BuildOptions, counts: tuple[int, int, int]) -> None:
    assert options.instance_counts == counts
    assert (options.preprocess_instances, options.detector_instances, options.nms_instances) == counts


def test_detector_spin_run_is_its_own_value_and_contradicts_always_spinning() -> None:
    assert BuildOptions().detector_spin_setting is None  # the shipped default: workers sleep
    assert BuildOptions(detector_spin="run").detector_spin_setting == "run"
    assert BuildOptions(detector_spinning=True).detector_spin_setting == "true"
    assert BuildOptions(detector_spin="alone").detector_spin_setting == "alone"
    with pytest.raises(SpecError, match="--detector-spin alone sets the workers of the CPU detector's session"):
        BuildOptions(detector_spin="alone", device="gpu")
    with pytest.raises(SpecError, match="unknown --detector-spin 'always'; choose one of off, run"):
        BuildOptions(detector_spin="always")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"--detector-spinning .* and --detector-spin run .* contradict"):
        BuildOptions(detector_spinning=True, detector_spin="run")
    with pytest.raises(SpecError, match="--detector-spin run sets the embedded detector's session"):
        BuildOptions(target="onnxruntime", detector_spin="run")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"target": "onnxruntime"}, "runs the embedded CPU detector"),
    ({"device": "gpu"}, "runs the embedded CPU detector"),
    ({"detector_spin": "run"}, "set ONNX Runtime's workers"),
    ({"detector_spinning": True}, "set ONNX Runtime's workers"),
    ({"normalise_in": "preprocess"}, "uint8 control images"),
])
def test_another_cpu_engine_is_for_the_embedded_cpu_detector(kwargs: dict[str, object], message: str) -> None:
    assert BuildOptions().cpu_engine == "onnxruntime"  # the shipped default
    with pytest.raises(SpecError, match=f"^--cpu-engine openvino.*{message}"):
        BuildOptions(cpu_engine="openvino", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="unknown --cpu-engine 'tensorflow'"):
        BuildOptions(cpu_engine="tensorflow")  # type: ignore[arg-type]


def test_openvino_detector_gets_its_engine_and_a_control_set() -> None:
    from generator.builder.pipeline import step_parameters
    from generator.builder.stages.provider_check_images import wants_check

    options = BuildOptions(cpu_engine="openvino")
    detector = step_parameters(options, "output0")["detector"]
    assert detector["cpu_engine"] == "openvino" and detector["provider_check"] == "provider_check.npz"
    assert wants_check(options) and not wants_check(BuildOptions())
    assert "cpu_engine" not in step_parameters(BuildOptions(), "output0")["detector"]
