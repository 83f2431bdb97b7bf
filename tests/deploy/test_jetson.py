"""The Jetson profile: rendered, schema-valid and held to its rules (no Jetson here: nothing of it is run)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from deploy import jetson
from deploy.checks import CHECK_SECRETS
from deploy.composefile import load_compose
from deploy.entrypoints.build_models import VolumeError, build_key
from deploy.errors import CheckError, SettingsError
from deploy.policy import jetson as policy
from deploy.settings import Settings, apply_overrides
from deploy.validate import compose_schema_errors

TOKEN = CHECK_SECRETS["TRITON_ADMIN_TOKEN"]


def test_the_profile_renders_valid_and_follows_its_rules(rendered_dir: Path, compose: dict[str, Any],
                                                        env: dict[str, str], settings: Settings) -> None:
    assert compose_schema_errors(compose) == []
    assert policy.compose_violations(compose, env, settings, TOKEN) == []
    assert policy.compose_text_violations((rendered_dir / "docker-compose.yml").read_text()) == []
    for image in policy.DOCKERFILES:
        text = (rendered_dir / "docker" / f"{image}.Dockerfile").read_text()
        assert policy.jetson_dockerfile_violations(text, image, settings) == [], image
    builder, triton = compose["services"]["builder-jetson"], compose["services"]["triton-jetson"]
    assert builder["runtime"] == triton["runtime"] == "nvidia"
    assert "--allow-gpu-metrics=false" in triton["command"]


def test_the_igpu_digest_is_required_at_deploy_time(rendered_dir: Path, env: dict[str, str]) -> None:
    """No public source readable here lists the iGPU image's digest: compose refuses to build until it is set."""
    text = (rendered_dir / "docker-compose.yml").read_text()
    assert env["JETSON_TRITON_DIGEST"] == ""
    with pytest.raises(CheckError, match="JETSON_TRITON_DIGEST"):
        load_compose(text, {**env, **{k: v for k, v in CHECK_SECRETS.items() if k != "JETSON_TRITON_DIGEST"}})
    loose = text.replace("${JETSON_TRITON_DIGEST:?", "${JETSON_TRITON_DIGEST:-")
    assert policy.compose_text_violations(loose)
    assert apply_overrides(Settings(), {"jetson_triton_digest": "sha256:" + "a" * 64}).jetson_triton_digest
    with pytest.raises(SettingsError, match="jetson_triton_digest"):
        apply_overrides(Settings(), {"jetson_triton_digest": "latest"})


def test_the_plan_is_static_fp16_and_built_on_the_device_by_default(settings: Settings) -> None:
    args = jetson.builder_command(settings)
    flags = args[args.index("--") + 1:]
    assert f"--key-file={jetson.L4T_MOUNT}" in args[:args.index("--")]
    for flag, value in (("--target", "tensorrt"), ("--precision", "fp16"), ("--max-batch", "1"), ("--opt-batch", "1"),
                        ("--triton-image", "nvcr.io/nvidia/tritonserver:26.08-py3-igpu")):
        assert flags[flags.index(flag) + 1] == value, flag
    assert "--imgsz" not in flags  # the ONNX's own static size
    assert "--defer-plan" not in flags  # the builder runs on the Jetson: the plan is made there


def test_camera_resolution_int8_and_bad_values() -> None:
    camera = apply_overrides(Settings(), {"jetson_image_size": "384x640"})
    flags = jetson.build_args(camera)
    assert flags[flags.index("--imgsz") + 1:flags.index("--imgsz") + 3] == ["384", "640"]
    with pytest.raises(SettingsError, match="multiples of 32"):
        apply_overrides(Settings(), {"jetson_image_size": "384x600"})
    with pytest.raises(SettingsError, match="height x width"):
        apply_overrides(Settings(), {"jetson_image_size": "640"})
    with pytest.raises(SettingsError, match="jetson_precision 'fp8'"):
        apply_overrides(Settings(), {"jetson_precision": "fp8"})
    fp32 = apply_overrides(Settings(), {"precision": "fp32"})
    assert jetson.build_args(fp32)[jetson.build_args(fp32).index("--precision") + 1] == "fp32"  # follows precision
    with pytest.raises(SettingsError, match="2025 security fixes"):
        apply_overrides(Settings(), {"jetson_release": "24.05"})
    own = {"detector_onnx": "models/site.onnx", "validate_images": "site/validate", "jetson_precision": "int8"}
    with pytest.raises(SettingsError, match="calib_images"):
        apply_overrides(Settings(), own)
    int8 = apply_overrides(Settings(), {**own, "calib_images": "site/calibrate"})
    flags = jetson.build_args(int8)
    assert flags[flags.index("--precision") + 1] == "int8" and "--calib-images" in flags


def _mutated(compose: dict[str, Any], service: str, key: str, value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(compose)
    if value is None:
        broken["services"][service].pop(key, None)
    else:
        broken["services"][service][key] = value
    return broken


@pytest.mark.parametrize(("service", "key", "value", "expected"), [
    ("builder-jetson", "runtime", None, "runtime must be nvidia"),
    ("triton-jetson", "deploy", {"resources": {"reservations": {"devices": [{"driver": "nvidia"}]}}}, "--gpus"),
    ("builder-jetson", "network_mode", "bridge", "network_mode must be none"),
    ("builder-jetson", "volumes", [{"type": "volume", "source": "model-repository-jetson", "target": "/models"}],
     "/etc/nv_tegra_release"),
    ("builder-jetson", "command", ["--volume=/models", "--", "--precision", "fp32"], "command must be"),
    ("triton-jetson", "shm_size", "64m", "shm_size"),
    ("triton-jetson", "network_mode", "bridge", "pod's namespace"),
    ("triton-jetson", "healthcheck", None, "healthcheck missing"),
])
def test_each_jetson_rule_catches_its_regression(compose: dict[str, Any], env: dict[str, str], settings: Settings,
                                                 service: str, key: str, value: Any, expected: str) -> None:
    problems = policy.compose_violations(_mutated(compose, service, key, value), env, settings, TOKEN)
    assert any(expected in p for p in problems), problems


def test_dockerfile_rules_catch_an_unpinned_base_and_root(rendered_dir: Path, settings: Settings) -> None:
    text = (rendered_dir / "docker" / "triton-jetson.Dockerfile").read_text()
    unpinned = text.replace("-py3-igpu@${JETSON_TRITON_DIGEST}", "-py3-igpu")
    assert any("FROM" in p for p in policy.jetson_dockerfile_violations(unpinned, "triton-jetson", settings))
    root = text + "USER root\n"
    assert any("non-root" in p for p in policy.jetson_dockerfile_violations(root, "triton-jetson", settings))
    builder = (rendered_dir / "docker" / "builder-jetson.Dockerfile").read_text()
    assert "tensorrt==${version}.*" in builder  # the bindings of the image's own libnvinfer


def test_a_jetpack_upgrade_changes_the_build_key(tmp_path: Path) -> None:
    """The L4T release file joins the key: a new JetPack adds a version (its plan) instead of reusing the old."""
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"onnx bytes")
    l4t = tmp_path / "nv_tegra_release"
    l4t.write_text("# R36 (release), REVISION: 4.3, GCID: 1, BOARD: generic, EABI: aarch64\n")
    flags = ["--onnx", str(onnx), "--target", "tensorrt"]
    before = build_key(flags, [l4t])
    assert build_key(flags, [l4t]) == before
    l4t.write_text("# R38 (release), REVISION: 2.0, GCID: 2, BOARD: generic, EABI: aarch64\n")
    assert build_key(flags, [l4t]) != before
    with pytest.raises(VolumeError, match="is not mounted"):
        build_key(flags, [tmp_path / "absent"])


def test_the_jetson_profile_set_finds_what_it_depends_on(compose: dict[str, Any]) -> None:
    profiles = {"jetson", "monitoring"}
    enabled = {name for name, svc in compose["services"].items() if set(svc.get("profiles") or []) & profiles}
    assert {"pod", "proxy", "builder-jetson", "triton-jetson"} <= enabled
    for name in enabled:
        needs = {need for need, how in (compose["services"][name].get("depends_on") or {}).items()
                 if how.get("required", True)}
        assert needs <= enabled, f"{name} depends on {sorted(needs - enabled)}"
