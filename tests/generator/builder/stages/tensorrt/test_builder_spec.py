import json

import pytest

from generator.builder.stages.tensorrt.bindings import TensorDesc
from generator.builder.stages.tensorrt.builder import BuildReport, BuildSpec, read_spec
from generator.builder.stages.tensorrt.errors import EngineBuildError
from generator.builder.stages.tensorrt.profiles import detector_profile

PROFILE = detector_profile("images", ["batch", 3, 320, 320], max_batch=8, opt_batch=4)


def _spec(**kwargs):
    return BuildSpec(onnx_path="detector.onnx", plan_path="model.plan", profiles=(PROFILE,), **kwargs)


def test_json_roundtrip_resolves_relative_paths(tmp_path):
    spec = _spec(timing_cache_path="timing.cache", optimization_level=5, hardware_compatibility="ampere_plus")
    path = tmp_path / "build_spec.json"
    path.write_text(json.dumps(spec.to_json()))
    loaded = read_spec(path)
    assert loaded.onnx_path == str(tmp_path / "detector.onnx")
    assert loaded.timing_cache_path == str(tmp_path / "timing.cache")
    assert loaded.profiles == (PROFILE,)
    assert loaded.hardware_compatibility == "ampere_plus" and loaded.optimization_level == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"optimization_level": 6}, "optimization level must be 0..5"),
        ({"workspace_bytes": 1000}, "at least 1 MiB"),
        ({"hardware_compatibility": "hopper"}, "unknown hardware compatibility"),
    ],
)
def test_invalid_specs_are_rejected_before_any_gpu_work(kwargs, message):
    with pytest.raises(EngineBuildError, match=message):
        _spec(**kwargs)


def test_spec_needs_a_profile_and_rejects_unknown_keys(tmp_path):
    with pytest.raises(EngineBuildError, match="at least one optimization profile"):
        BuildSpec(onnx_path="a.onnx", plan_path="b.plan", profiles=())
    path = tmp_path / "build_spec.json"
    path.write_text(json.dumps({**_spec().to_json(), "fp16": True}))
    with pytest.raises(EngineBuildError, match=r"unknown build spec key.*fp16"):
        read_spec(path)
    path.write_text("{")
    with pytest.raises(EngineBuildError, match="cannot read build spec"):
        read_spec(path)


def test_report_roundtrip():
    report = BuildReport(
        plan_path="model.plan",
        plan_bytes=123,
        tensors=(
            TensorDesc("images", "HALF", (-1, 3, 320, 320), True, (PROFILE.min, PROFILE.opt, PROFILE.max)),
        ),
        tensorrt_version="10.8.0.43",
        build_seconds=12.5,
        timing_cache_path=None,
        timing_cache_hit=False,
    )
    assert BuildReport.from_json(json.loads(json.dumps(report.to_json()))) == report
