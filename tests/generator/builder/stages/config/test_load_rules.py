"""Triton's load-time rules, one broken repository at a time; a good build breaks none of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, TensorRTOptions
from generator.builder.stages.config.load_rules import check_load_rules, repository_violations
from generator.builder.stages.config.model_io import ModelIO, ModelTensor
from generator.errors import ConfigError
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata

ORT_IO = ModelIO((ModelTensor("images_bgr_u8", "TYPE_UINT8", (-1, 64, 64, 3)),),
                 (ModelTensor("boxes_score_class", "TYPE_FP32", (-1, 6, 64)),))
ENGINE_IO = ModelIO((ModelTensor("images_bgr_u8", "TYPE_UINT8", (-1, 64, 64, 3),
                                 ((1, 64, 64, 3), (8, 64, 64, 3), (8, 64, 64, 3))),),
                    (ModelTensor("boxes_score_class", "TYPE_FP32", (-1, 6, 64)),))


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("rules")
    onnx_path = save(make_detector("v8", metadata=ultralytics_metadata(names=("a", "b")), seed=1), root / "m.onnx")
    out = {}
    for target, options in (("embedded", BuildOptions()), ("onnxruntime", BuildOptions(target="onnxruntime")),
                            # The head itself, as the rules below name it (NMS in the graph: test_placement.py).
                            ("tensorrt", BuildOptions(target="tensorrt", python_nms=True,
                                                      tensorrt=TensorRTOptions(defer_plan=True)))):
        out[target] = files_of(build_repository(onnx_path, root / target, options).output)
    return out


def io_for(target: str) -> dict[str, ModelIO]:
    return {"onnxruntime": {"yolo_detector": ORT_IO}, "tensorrt": {"yolo_detector": ENGINE_IO}}.get(target, {})


PENDING = {"yolo_detector/1/model.plan"}


@pytest.mark.parametrize("target", ["embedded", "onnxruntime", "tensorrt"])
def test_a_good_build_breaks_no_rule(repositories: dict[str, dict[str, bytes]], target: str) -> None:
    assert repository_violations(repositories[target], io_for(target), PENDING) == []


def broken(files: dict[str, bytes], model: str, edit: Callable[[mc.ModelConfig], None]) -> dict[str, bytes]:
    config = text_format.Parse(files[f"{model}/config.pbtxt"].decode(), mc.ModelConfig())
    edit(config)
    return {**files, f"{model}/config.pbtxt": text_format.MessageToString(config).encode()}


def _dims(tensor_list, index: int, dims: list[int]) -> Callable[[mc.ModelConfig], None]:
    def edit(config: mc.ModelConfig) -> None:
        getattr(config, tensor_list)[index].dims[:] = dims
    return edit


CASES: list[tuple[str, str, Callable[[mc.ModelConfig], None], str]] = [
    # core: model_config_utils.cc
    ("embedded", "yolo_nms", lambda c: setattr(c, "name", "nms"), "config name 'nms' differs from its directory"),
    ("onnxruntime", "yolo_detector", lambda c: setattr(c, "backend", "tensorrt"),
     "unexpected 'platform' and 'backend' pair"),
    ("embedded", "yolo_nms", _dims("output", 0, [0]), "dims [0]: each must be >= 1 or -1"),
    ("embedded", "yolo_nms", _dims("output", 0, []), "must specify 'dims'"),
    ("embedded", "yolo_preprocess", lambda c: c.dynamic_batching.preferred_batch_size.append(16),
     "preferred_batch_size 16 must be in 1..max_batch_size (8)"),
    ("embedded", "yolo_preprocess", lambda c: c.instance_group[0].gpus.append(0),
     "of KIND_CPU must not list gpus"),
    ("embedded", "yolo_nms", lambda c: c.instance_group[0].profile.append("0"),
     "'profile' is only allowed for platform tensorrt_plan"),
    ("embedded", "yolo_nms", lambda c: setattr(c.instance_group[0], "kind", mc.ModelInstanceGroup.KIND_GPU),
     "Python-backend steps run on the CPU"),
    ("embedded", "yolo_detector", lambda c: setattr(c, "default_model_filename", "other.py"),
     "version 1 has no other.py"),
    # warmup: backend_model_instance.cc GenerateWarmupData
    ("onnxruntime", "yolo_detector", lambda c: c.model_warmup[0].inputs["images_bgr_u8"].dims.__setitem__(0, 128),
     "warmup setting expects 24576 bytes, but the data provided from real_image only has 12288 bytes"),
    ("onnxruntime", "yolo_detector",
     lambda c: setattr(c.model_warmup[0].inputs["images_bgr_u8"], "data_type", mc.TYPE_FP32),
     "is TYPE_FP32 but the input is TYPE_UINT8"),
    ("onnxruntime", "yolo_detector", lambda c: c.model_warmup[0].inputs["images_bgr_u8"].dims.__setitem__(0, -1),
     "warmup expects all variable-size dimensions specified"),
    ("onnxruntime", "yolo_detector",
     lambda c: setattr(c.model_warmup[0].inputs["images_bgr_u8"], "input_data_file", "missing"),
     "reads yolo_detector/warmup/missing, which does not exist"),
    # ONNX Runtime backend: onnxruntime_utils.cc CompareDimsSupported, onnxruntime.cc LoadModel
    ("onnxruntime", "yolo_detector", _dims("input", 0, [-1, 64, 3]),
     "input 'images_bgr_u8' dims [-1, -1, 64, 3] do not match the ONNX shape [-1, 64, 64, 3]"),
    ("onnxruntime", "yolo_detector", _dims("output", 0, [6, -1]),
     "output 'boxes_score_class' dims [-1, 6, -1] do not match the ONNX shape [-1, 6, 64]"),
    ("onnxruntime", "yolo_detector", lambda c: setattr(c.output[0], "data_type", mc.TYPE_FP16),
     "configuration expects datatype TYPE_FP16 for output 'boxes_score_class', model provides TYPE_FP32"),
    ("onnxruntime", "yolo_detector", lambda c: setattr(c.input[0], "name", "images"),
     "the ONNX input 'images_bgr_u8' is not in the config"),
    ("onnxruntime", "yolo_detector", lambda c: setattr(c.instance_group[0], "kind", mc.ModelInstanceGroup.KIND_MODEL),
     "KIND_MODEL instances run on the CPU"),
    ("onnxruntime", "yolo_detector",
     lambda c: c.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt"),
     "gpu_execution_accelerator is ignored on KIND_CPU instances"),
    ("onnxruntime", "yolo_detector",
     lambda c: c.optimization.execution_accelerators.gpu_execution_accelerator.add(
         name="tensorrt", parameters={"trt_fp16_enable": "1"}),
     "unknown parameter 'trt_fp16_enable' is provided for TensorRT Execution Accelerator"),
    ("onnxruntime", "yolo_detector",
     lambda c: c.optimization.execution_accelerators.gpu_execution_accelerator.add(name="openvino"),
     "unknown Execution Accelerator 'openvino' is requested"),
    # TensorRT backend: instance_state.cc, tensorrt_utils.cc, model_state.cc
    ("tensorrt", "yolo_detector", lambda c: setattr(c.instance_group[0], "kind", mc.ModelInstanceGroup.KIND_CPU),
     "TensorRT backend supports only GPU device"),
    ("tensorrt", "yolo_detector", lambda c: setattr(c, "max_batch_size", 16),
     "configuration specified max-batch 16 but TensorRT engine only supports max-batch 8"),
    ("tensorrt", "yolo_detector", _dims("input", 0, [128, 64, 3]),
     "input 'images_bgr_u8' dims [-1, 128, 64, 3] do not match the engine shape [-1, 64, 64, 3]"),
    ("tensorrt", "yolo_detector", _dims("output", 0, [6, 64, 1]), "do not match the engine shape [-1, 6, 64]"),
    ("tensorrt", "yolo_detector", lambda c: setattr(c.input[0], "data_type", mc.TYPE_STRING),
     "is TYPE_STRING: unsupported datatype for TensorRT"),
    # ensembles: ensemble_utils.cc ValidateEnsembleConfig, model_config_utils.cc ValidateEnsembleSchedulingConfig
    ("embedded", "yolo", lambda c: c.instance_group.add(count=1), "an ensemble may not have instance_group"),
    ("embedded", "yolo", lambda c: c.dynamic_batching.SetInParent(), "an ensemble must not set dynamic_batching"),
    ("embedded", "yolo", lambda c: c.input.add(name="EXTRA", data_type=mc.TYPE_FP32, dims=[1]),
     "ensemble input 'EXTRA' is unused in ensemble"),
    ("embedded", "yolo", lambda c: c.ensemble_scheduling.step[0].output_map.__setitem__("LETTERBOX", "preprocessed"),
     "ensemble tensor 'preprocessed' is written more than once"),
    ("embedded", "yolo", lambda c: setattr(c, "max_batch_size", 16), "ensemble max_batch_size 16 exceeds"),
]


@pytest.mark.parametrize(("target", "model", "edit", "message"), CASES,
                         ids=[f"{c[0]}-{c[3][:40]}" for c in CASES])
def test_each_rule_refuses_what_triton_would(repositories: dict[str, dict[str, bytes]], target: str, model: str,
                                             edit: Callable[[mc.ModelConfig], None], message: str) -> None:
    files = broken(repositories[target], model, edit)
    violations = repository_violations(files, io_for(target), PENDING)
    assert any(message in str(v) for v in violations), violations
    with pytest.raises(ConfigError, match=r"Triton 2\.51 would refuse this repository: "):
        check_load_rules(files, io_for(target), PENDING)


def test_a_missing_model_file_is_reported_unless_it_is_pending(repositories: dict[str, dict[str, bytes]]) -> None:
    files = repositories["tensorrt"]
    assert any("version 1 has no model.plan" in str(v) for v in repository_violations(files, io_for("tensorrt")))
    onnx_files = {k: v for k, v in repositories["onnxruntime"].items() if k != "yolo_detector/1/model.onnx"}
    assert any("version 1 has no model.onnx" in str(v) for v in repository_violations(onnx_files, io_for("onnxruntime")))


def test_batching_needs_a_dynamic_first_dim_on_onnxruntime(repositories: dict[str, dict[str, bytes]]) -> None:
    static = ModelIO((ModelTensor("images_bgr_u8", "TYPE_UINT8", (1, 64, 64, 3)),),
                     (ModelTensor("boxes_score_class", "TYPE_FP32", (1, 6, 64)),))
    messages = [str(v) for v in repository_violations(repositories["onnxruntime"], {"yolo_detector": static})]
    assert any("the first dimension must be -1, but the ONNX has [1, 64, 64, 3]; re-export with a dynamic batch "
               "(yolo export ... dynamic=True) or serve it with max_batch_size 0" in m for m in messages), messages


def test_config_dims_must_lie_inside_a_dynamic_engine_profile(repositories: dict[str, dict[str, bytes]]) -> None:
    # TRTv3Interface ValidateDimension: an engine with dynamic spatial dims still has a profile range.
    dynamic = ModelIO((ModelTensor("images_bgr_u8", "TYPE_UINT8", (-1, -1, -1, 3),
                                   ((1, 32, 32, 3), (8, 64, 64, 3), (8, 64, 64, 3))),), ENGINE_IO.outputs)
    files = repositories["tensorrt"]
    assert repository_violations(files, {"yolo_detector": dynamic}, PENDING) == []
    wider = broken(files, "yolo_detector", _dims("input", 0, [128, 64, 3]))
    messages = [str(v) for v in repository_violations(wider, {"yolo_detector": dynamic}, PENDING)]
    assert any("input 'images_bgr_u8' dim 1 = 128 is outside the engine profile (1, 32, 32, 3)..(8, 64, 64, 3)"
               in m for m in messages), messages


def test_strict_parsing_uses_the_servers_release() -> None:
    """Configs are parsed with the model_config.proto of tritonclient 2.51 (the embedded server's release),
    not with the newer one of the tritonclient the project's clients use."""
    from generator.builder.stages.config.schema import model_config_class
    from generator.server.embedded import TRITON_VERSION
    from generator.server.environments import PERF_ANALYZER

    assert f"tritonclient=={TRITON_VERSION} " in PERF_ANALYZER.lock.read_text()
    ensemble_251 = model_config_class().DESCRIPTOR.fields_by_name["ensemble_scheduling"].message_type
    assert "max_inflight_requests" not in ensemble_251.fields_by_name  # common r25.12+
    assert "max_inflight_requests" in mc.ModelEnsembling.DESCRIPTOR.fields_by_name  # what tritonclient 2.73 has
