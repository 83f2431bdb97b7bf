from __future__ import annotations

from pathlib import Path

import pytest

from deploy.errors import SettingsError
from deploy.settings import ADMIN_API_GROUPS, Settings, apply_overrides, load_settings, release_tuple


def test_default_release_is_at_or_above_the_security_fixes_and_the_ready_fix() -> None:
    settings = Settings()
    assert release_tuple(settings.triton_release) >= (25, 7)
    assert settings.stub_aware_ready
    assert settings.tensorrt_base_image.endswith(f":{settings.triton_release}-py3")


@pytest.mark.parametrize("release", ["25.06", "24.12", "23.05"])
def test_releases_before_the_2025_fixes_are_refused(release: str) -> None:
    with pytest.raises(SettingsError, match="security fixes"):
        Settings(triton_release=release)


@pytest.mark.parametrize("release", ["26", "2026.08", "26.13", "v26.08"])
def test_malformed_release_tags_are_refused(release: str) -> None:
    with pytest.raises(SettingsError):
        Settings(triton_release=release)


def test_model_names_follow_the_generator_contract() -> None:
    settings = Settings(model_name="det")
    assert settings.composing_models == ("det_preprocess", "det_detector", "det_nms")
    assert settings.all_models == ("det", "det_preprocess", "det_detector", "det_nms")


@pytest.mark.parametrize("name", ["yolo", "Yolo-v8", "det_2", "a" * 64])
def test_the_model_name_rule_is_the_generators(name: str) -> None:
    """One rule: every name `generator build --name` accepts deploys, and nothing else does."""
    from generator.builder.spec.options import validate_model_name

    assert validate_model_name(name) == Settings(model_name=name).model_name


def test_every_pulled_image_is_pinned_by_tag_and_digest() -> None:
    from deploy.settings import is_pinned

    settings = Settings()
    for image in (settings.python_image, settings.nginx_image, settings.prometheus_image, settings.grafana_image):
        assert is_pinned(image), image
        name, _, digest = image.partition("@")
        assert ":" in name.rsplit("/", 1)[-1] and len(digest) == len("sha256:") + 64
    # The NGC digests are required at deploy time, never guessed: empty by default.
    assert settings.triton_base_digest == settings.tensorrt_base_digest == ""
    assert is_pinned("localhost:5000/vision/nginx:1.30@sha256:" + "a" * 64)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"grpc_port": 8000}, "distinct"),
        ({"http_port": 80}, "unprivileged"),
        ({"bind_address": "localhost"}, "not an IP"),
        ({"bind_address": "0.0.0.0"}, "loopback"),
        ({"proxy_bind_address": "example.com"}, "not an IP"),
        ({"proxy_http_port": 8001}, "distinct"),
        ({"model_name": "yolo\n"}, "model_name"),
        ({"model_name": "9yolo"}, "model_name"),
        ({"model_name": "a" * 65}, "model_name"),
        ({"normalise_in": "gpu"}, "normalise_in"),
        ({"nginx_image": "nginx:1.30.5-alpine"}, "not pinned"),
        ({"prometheus_image": "prom/prometheus@sha256:" + "0" * 64}, "not pinned"),
        ({"grafana_image": "grafana/grafana:12.1.0@sha256:abc"}, "not pinned"),
        ({"triton_base_digest": "26.08"}, "sha256"),
        ({"probe_timeout_s": 10, "probe_interval_s": 10}, "probe_timeout_s"),
        ({"hpa_min_replicas": 1, "replicas": 1}, "PodDisruptionBudget"),
        ({"run_as_uid": 0}, "non-root"),
        ({"input_size": 650}, "multiple of 32"),
        ({"detector_onnx": "../outside.onnx"}, "inside the repository"),
        ({"precision": "bf16"}, "precision"),
    ],
)
def test_unsafe_or_inconsistent_settings_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        apply_overrides(Settings(), overrides)


def test_unknown_keys_are_an_error_not_a_warning() -> None:
    with pytest.raises(SettingsError, match="unknown setting"):
        apply_overrides(Settings(), {"max_batch_size": 4})


def test_restricted_groups_are_not_a_setting() -> None:
    assert Settings().restricted_api_groups == ADMIN_API_GROUPS
    with pytest.raises(SettingsError, match="unknown setting"):
        apply_overrides(Settings(), {"restricted_api_groups": "model-repository"})


def test_yaml_then_set_flags_last_wins(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    # YAML reads 26.10 as the float 26.1: the month must survive.
    config.write_text("triton_release: 26.10\nmax_batch: 4\nnamespace: vision\n")
    settings = load_settings(config, ["max_batch=16", "bind_address=127.0.0.2"])
    assert settings.triton_release == "26.10"
    assert settings.max_batch == 16
    assert settings.namespace == "vision"
    assert settings.bind_address == "127.0.0.2"


@pytest.mark.parametrize("item", ["max_batch", "=4", "max_batch=four"])
def test_bad_set_flags_are_refused(item: str) -> None:
    with pytest.raises(SettingsError):
        load_settings(None, [item])


def test_settings_file_must_be_a_mapping(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("- max_batch\n")
    with pytest.raises(SettingsError, match="mapping"):
        load_settings(config)


@pytest.mark.parametrize("key", ["namespace", "admin_header", "kubernetes_version", "triton_release",
                                 "prometheus_namespace"])
def test_a_trailing_newline_is_not_a_valid_name(key: str) -> None:
    """``re.match`` with ``$`` accepts "name\\n": every pattern check here matches the whole value."""
    with pytest.raises(SettingsError):
        apply_overrides(Settings(), {key: getattr(Settings(), key) + "\n"})


@pytest.mark.parametrize(("overrides", "setting"), [
    ({"max_batch": 5000}, "max_batch"),
    ({"max_queue_ms": 10**9}, "max_queue_ms"),
    ({"max_image_pixels": 1 << 30}, "max_image_pixels"),
    ({"nms_in_graph": True, "max_detections": 5000}, "max_detections"),
    ({"cpu_precision": "fp64"}, "cpu_precision"),
])
def test_the_generator_decides_what_a_build_setting_may_be_and_the_error_names_the_setting(
        overrides: dict[str, object], setting: str) -> None:
    with pytest.raises(SettingsError, match=rf"^{setting}\b.*--"):
        apply_overrides(Settings(), overrides)


def test_your_own_model_needs_its_gate_images_or_an_explicit_skip() -> None:
    own = {"detector_onnx": "models/street.onnx"}
    with pytest.raises(SettingsError, match="validate_images"):
        apply_overrides(Settings(), own)
    assert apply_overrides(Settings(), {**own, "accuracy_gate": "false"}).accuracy_gate is False
    assert apply_overrides(Settings(), {**own, "precision": "fp32"}).precision == "fp32"
    with pytest.raises(SettingsError, match="calib_images"):
        apply_overrides(Settings(), {**own, "precision": "int8", "validate_images": "data/val"})


def test_the_queue_budget_is_derived_by_the_generator_unless_the_settings_give_an_sla() -> None:
    from deploy.commands import build_args
    from deploy.settings import build_options

    assert Settings().max_queue_ms == 0
    for target in ("tensorrt", "onnxruntime"):
        assert build_options(Settings(), target).max_queue_ms is None
        assert "--max-queue-ms" not in build_args(Settings(), target)
    sla = apply_overrides(Settings(), {"max_queue_ms": "400"})
    args = build_args(sla, "tensorrt")
    assert args[args.index("--max-queue-ms") + 1] == "400"
    with pytest.raises(SettingsError, match=r"^max_queue_ms\b.*--max-queue-ms must be between 1"):
        apply_overrides(Settings(), {"max_queue_ms": -1})
