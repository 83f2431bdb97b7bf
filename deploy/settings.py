"""The one place deployment values live: every rendered file reads them from ``Settings``.

Defaults are the committed render. A YAML file or ``--set key=value`` flags override them; unknown
keys and values that would break a deployment rule (old Triton release, clashing ports, unsafe model
names) are rejected here, before anything is rendered.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.errors import SettingsError

# The admin API groups restricted on both protocols: one list, also used by `python -m generator serve`.
from generator.server.hardening import ADMIN_API_GROUPS

# The 2025 security fixes (HTTP server and Python backend CVEs) ship in 25.07 and later.
MIN_TRITON_RELEASE = "25.07"
# From this release on /v2/health/ready notices a dead Python-backend stub.
STUB_AWARE_READY_RELEASE = "26.04"

_RELEASE_RE = re.compile(r"^(\d{2})\.(\d{2})$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_DNS_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_HEADER_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_K8S_VERSION_RE = re.compile(r"^1\.\d{2}$")
_PRECISIONS = ("fp32", "fp16", "int8")


def release_tuple(release: str) -> tuple[int, int]:
    """Parse an NGC ``yy.mm`` release tag into a comparable tuple."""
    match = _RELEASE_RE.match(release)
    if match is None:
        raise SettingsError(f"triton_release {release!r} is not an NGC release tag like '26.08'")
    year, month = int(match.group(1)), int(match.group(2))
    if not 1 <= month <= 12:
        raise SettingsError(f"triton_release {release!r} has no month {month}")
    return year, month


@dataclass(frozen=True)
class Settings:
    """Every value a deployment file needs; derived values are properties, never settings."""

    # --- images -------------------------------------------------------------------------------
    # 26.08: >= 25.07 (2025 CVE fixes) and >= 26.04 (ready endpoint notices a dead Python stub).
    # 26.x containers need compute capability >= 7.5; for V100/P100 hosts pick a 25.x >= 25.07.
    triton_release: str = "26.08"
    project_version: str = "0.1.0"
    image_registry: str = "registry.example.com/yolo"
    triton_image_name: str = "yolo-triton"
    builder_image_name: str = "yolo-trt-builder"
    loadtest_image_name: str = "yolo-locust"
    python_image: str = "python:3.11-slim-bookworm"
    prometheus_image: str = "prom/prometheus:v3.5.0"
    grafana_image: str = "grafana/grafana:12.1.0"
    # Repo-relative path of the ONNX detector baked into the builder image (default: the bundled demo).
    detector_onnx: str = "generator/demo/demo_detector.onnx"

    # --- model (generator contract) -----------------------------------------------------------
    model_name: str = "yolo"
    precision: str = "fp16"
    # The CPU profile's detector runs on ONNX Runtime, where FP16 is slower than FP32.
    cpu_precision: str = "fp32"
    max_batch: int = 8
    # Largest model input side served; sizes /dev/shm (a smaller model fits in the same budget).
    input_size: int = 640
    num_classes: int = 80
    max_detections: int = 100
    # Instances of each Python model (preprocess, NMS); passed to `generator build --instances`.
    python_instances: int = 2
    # Serving cap on one encoded image; bounds the HTTP body and /dev/shm sizing.
    max_image_bytes: int = 4 * 1024 * 1024
    # GPU profile only (the CPU profile always preprocesses on the CPU): `generator build --preprocess-device`;
    # "gpu" also installs the project's `gpu` extra into the builder and Triton images.
    preprocess_device: str = "cpu"
    # `generator build --nms-in-graph`: NMS inside the detector graph (TensorRT runs it on the GPU).
    nms_in_graph: bool = False

    # --- network ------------------------------------------------------------------------------
    bind_address: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    prometheus_port: int = 9090
    grafana_port: int = 3000
    locust_web_port: int = 8089
    locust_master_port: int = 5557

    # --- security -----------------------------------------------------------------------------
    admin_header: str = "admin-key"
    run_as_uid: int = 1000
    run_as_gid: int = 1000

    # --- load test ----------------------------------------------------------------------------
    locust_workers: int = 2
    locust_users: int = 32
    locust_spawn_rate: int = 4
    locust_run_time: str = "5m"
    locust_protocol: str = "grpc"

    # --- kubernetes ---------------------------------------------------------------------------
    kubernetes_version: str = "1.33"
    namespace: str = "yolo-serving"
    replicas: int = 2
    hpa_min_replicas: int = 2
    hpa_max_replicas: int = 8
    queue_time_target_ms: int = 20
    gpus_per_pod: int = 1
    cpu_request: str = "4"
    memory_request_mib: int = 8192
    metrics_scrape_interval: str = "15s"

    def __post_init__(self) -> None:
        if release_tuple(self.triton_release) < release_tuple(MIN_TRITON_RELEASE):
            raise SettingsError(
                f"triton_release {self.triton_release} predates the 2025 security fixes; "
                f"use {MIN_TRITON_RELEASE} or later"
            )
        if not _NAME_RE.match(self.model_name):
            raise SettingsError(f"model_name {self.model_name!r} must match {_NAME_RE.pattern}")
        for key in ("precision", "cpu_precision"):
            if getattr(self, key) not in _PRECISIONS:
                raise SettingsError(f"{key} {getattr(self, key)!r} is not one of {', '.join(_PRECISIONS)}")
        for key in (
            "max_batch",
            "input_size",
            "num_classes",
            "max_detections",
            "python_instances",
            "max_image_bytes",
            "locust_workers",
            "locust_users",
            "locust_spawn_rate",
            "replicas",
            "hpa_min_replicas",
            "hpa_max_replicas",
            "queue_time_target_ms",
            "gpus_per_pod",
            "memory_request_mib",
        ):
            if getattr(self, key) < 1:
                raise SettingsError(f"{key} must be at least 1, got {getattr(self, key)}")
        if self.input_size % 32:
            raise SettingsError(f"input_size {self.input_size} must be a multiple of 32 (YOLO strides)")
        ports = {
            k: getattr(self, k)
            for k in (
                "http_port",
                "grpc_port",
                "metrics_port",
                "prometheus_port",
                "grafana_port",
                "locust_web_port",
                "locust_master_port",
            )
        }
        for key, port in ports.items():
            if not 1024 <= port <= 65535:
                raise SettingsError(f"{key} {port} must be an unprivileged port (1024-65535)")
        if len(set(ports.values())) != len(ports):
            raise SettingsError(f"ports must be distinct, got {ports}")
        try:
            ipaddress.ip_address(self.bind_address)
        except ValueError as exc:
            raise SettingsError(f"bind_address {self.bind_address!r} is not an IP address") from exc
        if not _HEADER_RE.match(self.admin_header):
            raise SettingsError(f"admin_header {self.admin_header!r} must be a lower-case header name")
        if self.run_as_uid == 0 or self.run_as_gid == 0:
            raise SettingsError("run_as_uid/run_as_gid must not be 0: the containers run as non-root")
        if not _DNS_RE.match(self.namespace):
            raise SettingsError(f"namespace {self.namespace!r} is not a DNS-1123 label")
        if not _K8S_VERSION_RE.match(self.kubernetes_version):
            raise SettingsError(f"kubernetes_version {self.kubernetes_version!r} must look like '1.33'")
        if not self.hpa_min_replicas <= self.replicas <= self.hpa_max_replicas:
            raise SettingsError("need hpa_min_replicas <= replicas <= hpa_max_replicas")
        if self.hpa_min_replicas < 2:
            raise SettingsError(
                "hpa_min_replicas must be >= 2, or the PodDisruptionBudget blocks every drain"
            )
        if self.preprocess_device not in ("cpu", "gpu"):
            raise SettingsError(f"preprocess_device {self.preprocess_device!r} must be 'cpu' or 'gpu'")
        if self.locust_protocol not in ("grpc", "http"):
            raise SettingsError(f"locust_protocol {self.locust_protocol!r} must be 'grpc' or 'http'")
        if Path(self.detector_onnx).is_absolute() or ".." in Path(self.detector_onnx).parts:
            raise SettingsError(
                "detector_onnx must be a path inside the repository (it is the build context)"
            )

    # --- derived values ---------------------------------------------------------------------------
    @property
    def composing_models(self) -> tuple[str, str, str]:
        """Composing model names, in pipeline order, per the generator contract."""
        return (f"{self.model_name}_preprocess", f"{self.model_name}_detector", f"{self.model_name}_nms")

    @property
    def all_models(self) -> tuple[str, ...]:
        """The ensemble followed by its composing models: what a health check must find ready."""
        return (self.model_name, *self.composing_models)

    @property
    def image_tag(self) -> str:
        """Tag of the derived images: the Triton release they wrap plus the project version."""
        return f"{self.triton_release}-{self.project_version}"

    @property
    def triton_base_image(self) -> str:
        return f"nvcr.io/nvidia/tritonserver:{self.triton_release}-py3"

    @property
    def tensorrt_base_image(self) -> str:
        """Same release as Triton, so the plan's TensorRT version matches the server's."""
        return f"nvcr.io/nvidia/tensorrt:{self.triton_release}-py3"

    @property
    def restricted_api_groups(self) -> tuple[str, ...]:
        """Not a setting: the admin groups are always restricted on both protocols."""
        return ADMIN_API_GROUPS

    @property
    def stub_aware_ready(self) -> bool:
        return release_tuple(self.triton_release) >= release_tuple(STUB_AWARE_READY_RELEASE)


def field_names() -> tuple[str, ...]:
    """Names a YAML file or ``--set`` may override."""
    return tuple(f.name for f in dataclasses.fields(Settings))


def _coerce(name: str, raw: Any) -> Any:
    """Convert a YAML value or a ``--set`` string to the field's type, naming the field on error."""
    default = getattr(Settings(), name)
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if str(raw).lower() in ("true", "false"):
            return str(raw).lower() == "true"
    elif isinstance(default, int):
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and re.fullmatch(r"-?\d+", raw.strip()):
            return int(raw)
    elif isinstance(default, str) and isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
        # YAML reads 26.08 as a float; keep the two-digit month.
        return f"{raw:.2f}" if isinstance(raw, float) else str(raw)
    raise SettingsError(f"setting {name}: {raw!r} is not a valid {type(default).__name__}")


def apply_overrides(base: Settings, overrides: Mapping[str, Any]) -> Settings:
    """Return ``base`` with overrides applied; unknown keys are an error, not a warning."""
    allowed = set(field_names())
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
    return dataclasses.replace(base, **{k: _coerce(k, v) for k, v in overrides.items()})


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """Turn ``key=value`` CLI flags into a mapping."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--set {item!r} must look like key=value")
        result[key.strip()] = value.strip()
    return result


def load_settings(config: Path | None = None, assignments: Iterable[str] = ()) -> Settings:
    """Defaults, then the YAML file, then ``--set`` flags (last wins)."""
    import yaml

    settings = Settings()
    if config is not None:
        try:
            data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"cannot read settings file {config}: {exc}") from exc
        if not isinstance(data, dict):
            raise SettingsError(f"settings file {config} must hold a mapping of setting: value")
        settings = apply_overrides(settings, data)
    return apply_overrides(settings, parse_assignments(assignments))
