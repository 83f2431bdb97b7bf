"""The one place deployment values live: every rendered file reads them from ``Settings``.

Defaults are the committed render. A YAML file or ``--set key=value`` flags override them; unknown
keys and values that would break a deployment rule (old Triton release, clashing ports, unsafe model
names, images not pinned by digest) are rejected here, before anything is rendered.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.errors import SettingsError
from generator.builder.spec.declarations import declared
from generator.builder.spec.options import (
    PRECISIONS,
    BuildOptions,
    Device,
    NormaliseIn,
    Precision,
    SpecError,
    Target,
)
from generator.server.cuda_pool import DEFAULT_MIB as CUDA_POOL_MIB

# The admin API groups restricted on both protocols: one list, also used by `python -m generator serve`.
from generator.server.embedded import TRITON_VERSION
from generator.server.hardening import ADMIN_API_GROUPS
from generator.server.tracing import TraceSettings, TraceSettingsError

# The 2025 security fixes (HTTP server and Python backend CVEs) ship in 25.07 and later.
MIN_TRITON_RELEASE = "25.07"
# The Docker Engine and Compose the stack needs: healthcheck.start_interval (every health check of the compose file)
# needs the Engine API 1.44, i.e. Docker Engine 25 (moby/moby #40894), and a Compose v2 that passes it on
# (docker/compose #11360, in 2.24). Checked by deploy/local/docker_versions.py before a local stack starts, and
# named in the rendered compose file (deploy/render/files.py).
MIN_ENGINE = (25, 0)
MIN_COMPOSE = (2, 24)
# From this release on /v2/health/ready notices a dead Python-backend stub.
STUB_AWARE_READY_RELEASE = "26.04"

_RELEASE_RE = re.compile(r"^(\d{2})\.(\d{2})$")
_DNS_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_HEADER_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_K8S_VERSION_RE = re.compile(r"^1\.\d{2}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# registry/repository:tag@sha256:<64 hex>; the tag says what it is, the digest what is pulled.
_PINNED_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9._/-]*(?::\d+/[a-z0-9._/-]+)?):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"
                        r"@(?P<digest>sha256:[0-9a-f]{64})$")
# Paths inside the builder image (deploy/templates/builder.Dockerfile.j2 copies them there).
DETECTOR_ONNX_PATH = "/opt/detector/model.onnx"
VALIDATE_IMAGES_PATH = "/opt/detector/validate"
VALIDATE_LABELS_PATH = "/opt/detector/validate-labels.json"
CALIB_IMAGES_PATH = "/opt/detector/calibrate"


DEMO_DETECTOR = "generator/demo/demo_detector.onnx"


def _generator_default(path: str) -> Any:
    """A build option's own default, so a value deploy does not decide follows ``generator build``."""
    return next(item.default for item in declared(BuildOptions) if ".".join(item.path) == path)


def release_tuple(release: str) -> tuple[int, int]:
    """Parse an NGC ``yy.mm`` release tag into a comparable tuple."""
    match = _RELEASE_RE.fullmatch(release)
    if match is None:
        raise SettingsError(f"triton_release {release!r} is not an NGC release tag like '26.08'")
    year, month = int(match.group(1)), int(match.group(2))
    if not 1 <= month <= 12:
        raise SettingsError(f"triton_release {release!r} has no month {month}")
    return year, month


def is_pinned(image: str) -> bool:
    """``name:tag@sha256:<digest>``: readable and immutable at once."""
    return _PINNED_RE.fullmatch(image) is not None


def is_digest(value: str) -> bool:
    return _DIGEST_RE.fullmatch(value) is not None


@dataclass(frozen=True)
class Settings:
    """Every value a deployment file needs; derived values are properties, never settings."""

    # --- images -------------------------------------------------------------------------------
    # 26.08: >= 25.07 (2025 CVE fixes) and >= 26.04 (ready endpoint notices a dead Python stub).
    # 26.x containers need compute capability >= 7.5; for V100/P100 hosts pick a 25.x >= 25.07.
    triton_release: str = "26.08"
    # Digests of nvcr.io/nvidia/tritonserver:<release>-py3 and nvcr.io/nvidia/tensorrt:<release>-py3. No
    # public source this project can read lists NGC digests, so they are required at deploy time instead of
    # guessed: the committed .env leaves them empty and compose refuses to build until they are set. Refresh:
    #   docker buildx imagetools inspect nvcr.io/nvidia/tritonserver:26.08-py3 --format '{{json .Manifest.Digest}}'
    triton_base_digest: str = ""
    tensorrt_base_digest: str = ""
    # Every other image is pinned by tag AND digest (the digest is what is pulled). Digests recorded from
    # public sources on 2026-11-30; refresh with the command above (or `docker pull` then
    # `docker inspect --format '{{index .RepoDigests 0}}' IMAGE`), and update tag and digest together.
    # The slim CPU Triton image and the CPU builder are built on Debian's official image: bookworm, whose Python
    # 3.11 runs the 3.11 backend stub of the pinned wheel. A dated tag (the index digest covers amd64 and arm64).
    # Source: docker-library/repo-info repos/debian/remote/bookworm-20260918-slim.md.
    debian_image: str = (
        "debian:bookworm-20260918-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251"
    )
    # Source: docker-library/repo-info repos/python/remote/3.11-slim-bookworm.md (Python 3.11.16).
    python_image: str = (
        "python:3.11-slim-bookworm@sha256:fe556eaffd0d96abd8685b83bb8a69addd0dc730fa193669a7df0d49ddcfac02"
    )
    # Source: docker-library/repo-info repos/nginx/remote/1.30.5-alpine.md (stable line).
    nginx_image: str = "nginx:1.30.5-alpine@sha256:0985e772fb9f729e6fa0980da05fca5d9c468e870eed43071545afa9d2e27d94"
    # Sources: the same digest pinned for these tags in several independent public repositories.
    prometheus_image: str = (
        "prom/prometheus:v3.5.0@sha256:63805ebb8d2b3920190daf1cb14a60871b16fd38bed42b857a3182bc621f4996"
    )
    grafana_image: str = (
        "grafana/grafana:12.1.0@sha256:6ac590e7cabc2fbe8d7b8fc1ce9c9f0582177b334e0df9c927ebd9670469440f"
    )
    project_version: str = "0.1.0"
    image_registry: str = "registry.example.com/yolo"
    triton_image_name: str = "yolo-triton"
    builder_image_name: str = "yolo-trt-builder"
    # The CPU stack's images (Triton 2.51 from the pinned wheel on Debian, and its builder).
    triton_cpu_image_name: str = "yolo-triton-cpu"
    builder_cpu_image_name: str = "yolo-builder-cpu"
    loadtest_image_name: str = "yolo-locust"
    # Digests of the images this project builds, once pushed to image_registry (Kubernetes pulls them by digest
    # when set; compose builds them locally from the pinned bases above). With kubernetes_stack cpu the builder and
    # Triton digests are those of the CPU stack's images.
    triton_image_digest: str = ""
    builder_image_digest: str = ""
    loadtest_image_digest: str = ""
    # Repo-relative path of the ONNX detector baked into the builder image (default: the bundled demo).
    detector_onnx: str = DEMO_DETECTOR
    # FP16/INT8 builds of your own model run the accuracy gate on images of its domain: a repo-relative folder
    # baked into the builder image (`--validate-images`; labels: a COCO JSON beside it, `--validate-labels`), or
    # accuracy_gate false (`--no-validate`, recorded in the manifest). INT8 also needs calib_images
    # (`--calib-images`). The bundled demo needs none of them.
    validate_images: str = ""
    validate_labels: str = ""
    accuracy_gate: bool = True
    calib_images: str = ""

    # --- model (generator contract; passed to `generator build`) ------------------------------
    model_name: str = "yolo"
    precision: Precision = "fp16"
    # The CPU profile's detector runs on ONNX Runtime, where FP16 is slower than FP32.
    cpu_precision: Precision = "fp32"
    max_batch: int = _generator_default("max_batch")
    # Largest model input side served; sizes /dev/shm (a smaller model fits in the same budget).
    input_size: int = 640
    num_classes: int = 80
    max_detections: int = _generator_default("max_detections")
    # Instances of each Python model (preprocess, NMS); passed to `generator build --instances`.
    python_instances: int = 2
    # The latency budget every step's queue is sized from: beyond it requests are shed at once with UNAVAILABLE
    # (HTTP 503) instead of waiting (README "Overload"). 0: the generator derives it from the service time it
    # measures on the build host (its default); any other value is an SLA passed as `--max-queue-ms`.
    max_queue_ms: int = 0
    # Serving caps on one encoded image (`--max-image-bytes`, `--max-image-pixels`); they bound the proxy's
    # body limit, /dev/shm and OpenCV's own decoder limit (OPENCV_IO_MAX_IMAGE_PIXELS).
    max_image_bytes: int = 4 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    # What travels between the steps (`--normalise-in`, `--no-reduce-head`): sizes /dev/shm.
    normalise_in: NormaliseIn = _generator_default("normalise_in")
    reduce_head: bool = _generator_default("reduce_head")
    # TensorRT plans built with BuilderFlag.VERSION_COMPATIBLE (`--version-compatible`); the server then
    # gets --backend-config=tensorrt,version-compatible=true from the repository's manifest.
    version_compatible: bool = False
    # GPU profile only (the CPU profile always preprocesses on the CPU): `generator build --preprocess-device`;
    # "gpu" also installs the project's `gpu` extra into the builder and Triton images.
    preprocess_device: Device = "cpu"
    # `generator build --nms-in-graph`: NMS inside the detector graph (TensorRT runs it on the GPU).
    nms_in_graph: bool = _generator_default("nms_in_graph")
    # preprocess_device=gpu: Triton's CUDA memory pool per GPU holds the images between the steps
    # (--cuda-memory-pool-byte-size; Triton's 64 MiB fills at a few 640x640 batches in flight, and an image that
    # misses it is never handed to the detector while its request succeeds: generator/server/cuda_pool.py).
    cuda_pool_mib: int = CUDA_POOL_MIB

    # --- network ------------------------------------------------------------------------------
    # Triton's own ports: bound on 127.0.0.1 inside the proxy's network namespace (compose) or pod
    # (Kubernetes); only metrics listen on the container network, for Prometheus.
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    # The TLS proxy (nginx) in front of them: the only way in for clients.
    proxy_http_port: int = 8443
    proxy_grpc_port: int = 8444
    # The proxy's own health endpoint, on the loopback of its network namespace only: it proxies Triton's
    # readiness, so the proxy's health check fails whenever the path to Triton is broken.
    proxy_health_port: int = 8445
    # Host address compose publishes the proxy on; set a non-loopback IP to serve remote clients.
    proxy_bind_address: str = "127.0.0.1"
    # A canary during `generator rollout` (README "Updating a model safely"): the proxy sends this share of the
    # HTTP inference requests for model_name to canary_model (MODEL_vN, loaded beside the stable version);
    # 0: no split. gRPC names the model inside the message, so its split stays with the clients.
    canary_model: str = ""
    canary_percent: float = 0.0
    # Host address of everything else compose publishes (dashboards, Locust UI): loopback only.
    bind_address: str = "127.0.0.1"
    prometheus_port: int = 9090
    grafana_port: int = 3000
    locust_web_port: int = 8089
    locust_master_port: int = 5557

    # --- security -----------------------------------------------------------------------------
    admin_header: str = "admin-key"
    run_as_uid: int = 1000
    run_as_gid: int = 1000

    # --- self-healing and drain (generator/server/watchdog.py, generator/server/shutdown.py) ---
    probe_failures: int = 3
    probe_interval_s: int = 10
    probe_timeout_s: int = 5
    # tritonserver --exit-timeout-secs: in-flight requests get this long after SIGTERM.
    exit_timeout_s: int = 30

    # --- telemetry: traces, the watchdog's metrics, alert thresholds (deploy/render/alerts.py) -----------
    # OTLP/HTTP receiver of Triton's OpenTelemetry traces (e.g. http://otel-collector:4318/v1/traces); empty: off.
    trace_otlp_url: str = ""
    # Requests without a W3C traceparent: trace every N-th (0: none); those with one are always traced.
    trace_rate: int = 1000
    # The watchdog's Prometheus endpoint (restarts by reason), next to Triton's metrics port.
    watchdog_metrics_port: int = 8003
    # Alert when the ensemble's p95 latency (Triton's summary over its sliding window) stays above this.
    latency_sla_p95_ms: int = 250
    # Alert when more than this share of ensemble requests fail (bad images and shed requests count).
    alert_error_percent: int = 1
    # Alert when a request waits longer than this in the queues of the steps together (mean over 5 min).
    alert_queue_ms: int = 50
    # Alert when the share of images answered with no detection rises this many points above the last hour's.
    alert_empty_jump_points: int = 20
    # Ratio and latency alerts stay silent below this many ensemble requests (or images) per minute over their
    # window: a handful of requests is no share and no p95. Well above the watchdog's probes (12 a minute).
    alert_min_per_minute: int = 60
    alert_gpu_memory_percent: int = 90
    # Power draw at this share of the limit: the GPU is power-capped, its clocks throttled.
    alert_power_percent: int = 98

    # --- load test ----------------------------------------------------------------------------
    locust_workers: int = 2
    locust_users: int = 32
    locust_spawn_rate: int = 4
    locust_run_time: str = "5m"
    locust_protocol: str = "grpc"

    # --- host limits of the GPU stack (NVIDIA's recommended container ulimits for TensorRT and CUDA) ---
    # memlock -1 (unlimited) lets CUDA pin host memory; stack 64 MiB. Only the GPU services get them: a daemon
    # that cannot raise them (rootless, a capped host) starts no container that asks. 0: not set at all.
    gpu_ulimit_memlock: int = -1
    gpu_ulimit_stack: int = 67108864

    # --- Jetson profile (deploy/jetson.py, docs/EDGE.md; rendered and checked here, not run: no Jetson) ------
    # nvcr.io/nvidia/tritonserver:<jetson_release>-py3-igpu: Triton's JetPack containers (published since 23.11,
    # each built on the JetPack current at its release; NVIDIA's Frameworks Support Matrix pairs tag and JetPack).
    # Its digest is required at deploy time like the NGC x86 pins above: no public source readable from here lists
    # it, so it is never guessed. On the Jetson:
    #   docker buildx imagetools inspect nvcr.io/nvidia/tritonserver:26.08-py3-igpu --format '{{json .Manifest.Digest}}'
    jetson_release: str = "26.08"
    jetson_triton_digest: str = ""
    # The plan is built on the device at first start (TensorRT plans the memory of the worst case its profile
    # admits): static shapes by default, batch 1 and the ONNX's own input size; jetson_image_size "HxW" (multiples
    # of 32) for a model with dynamic spatial axes sized to the camera: one plan per camera resolution.
    # Empty: `precision`'s (FP16 by default), so one model's accuracy gate covers both GPU builds.
    jetson_precision: str = ""
    jetson_max_batch: int = 1
    jetson_image_size: str = ""
    # The TensorRT builder's scratch memory: the GPU shares the board's RAM (8 GiB on an Orin Nano).
    jetson_workspace_mib: int = 1024
    # Alert when a Jetson temperature zone (tegrastats) stays above this: the SoC throttles near its trip points.
    alert_jetson_temperature_celsius: int = 85

    # --- kubernetes ---------------------------------------------------------------------------
    kubernetes_version: str = "1.33"
    # Which stack the Deployment runs: "gpu" (the NGC images, a TensorRT plan per node) or "cpu" (the slim CPU
    # image and its builder, `--target embedded`, no GPU requested).
    kubernetes_stack: str = "gpu"
    namespace: str = "yolo-serving"
    replicas: int = 2
    hpa_min_replicas: int = 2
    hpa_max_replicas: int = 8
    queue_time_target_ms: int = 20
    gpus_per_pod: int = 1
    cpu_request: str = "4"
    memory_request_mib: int = 8192
    metrics_scrape_interval: str = "15s"
    # Where the Prometheus that scrapes Triton runs: the NetworkPolicy admits only it to the metrics port.
    prometheus_namespace: str = "monitoring"
    prometheus_pod_name: str = "prometheus"  # its app.kubernetes.io/name label
    # The versioned repository on one ReadWriteMany claim, filled by the build Job and read by every pod; "" takes
    # the cluster's default StorageClass, which must offer ReadWriteMany (NFS, CephFS, EFS, Filestore...).
    models_storage_class: str = ""
    models_storage_gib: int = 20
    # GPU stack: the plan is built on the build Job's GPU, so every pod must land on that product; the
    # nvidia.com/gpu.product label (GPU feature discovery) of the nodes, e.g. NVIDIA-H100-80GB-HBM3. "": unpinned
    # (one GPU product in the cluster); `generator check` in each pod still refuses a plan for another GPU.
    gpu_product: str = ""

    def __post_init__(self) -> None:
        _check_images(self)
        _check_model(self)
        _check_network(self)
        _check_kubernetes(self)
        _check_telemetry(self)
        _check_canary(self)
        _check_jetson(self)

    # --- derived values ---------------------------------------------------------------------------
    @property
    def composing_models(self) -> tuple[str, str, str]:
        """Composing model names, in pipeline order, per the generator contract."""
        return (f"{self.model_name}_preprocess", f"{self.model_name}_detector", f"{self.model_name}_nms")

    @property
    def all_models(self) -> tuple[str, ...]:
        """The ensemble followed by its composing models."""
        return (self.model_name, *self.composing_models)

    def step_regex(self, step: str = "(preprocess|detector|nms)") -> str:
        """A Prometheus label regex for the composing models of every version: the stack serves a versioned
        repository (``yolo_v1_nms``, ``yolo_v2_nms`` during a rollout); a classic one's ``yolo_nms`` matches too."""
        return f"{self.model_name}(_v[0-9]+)?_{step}"

    @property
    def models_regex(self) -> str:
        """The ensembles (the alias, each version's) and their steps, as a Prometheus label regex."""
        return f"{self.model_name}(_v[0-9]+)?(_(preprocess|detector|nms))?"

    @property
    def image_tag(self) -> str:
        """Tag of the derived images: the Triton release they wrap plus the project version."""
        return f"{self.triton_release}-{self.project_version}"

    @property
    def cpu_image_tag(self) -> str:
        """Tag of the CPU stack's images: the Triton version of the pinned wheel plus the project version."""
        return f"{TRITON_VERSION}-{self.project_version}"

    @property
    def triton_base_image(self) -> str:
        return f"nvcr.io/nvidia/tritonserver:{self.triton_release}-py3"

    @property
    def tensorrt_base_image(self) -> str:
        """Same release as Triton, so the plan's TensorRT version matches the server's."""
        return f"nvcr.io/nvidia/tensorrt:{self.triton_release}-py3"

    @property
    def jetson_build_precision(self) -> Precision:
        """The Jetson plan's precision: ``jetson_precision``, or the GPU stack's ``precision``."""
        return typing.cast(Precision, self.jetson_precision or self.precision)

    @property
    def restricted_api_groups(self) -> tuple[str, ...]:
        """Not a setting: the admin groups are always restricted on both protocols."""
        return ADMIN_API_GROUPS

    @property
    def stub_aware_ready(self) -> bool:
        return release_tuple(self.triton_release) >= release_tuple(STUB_AWARE_READY_RELEASE)

    @property
    def trace_settings(self) -> TraceSettings | None:
        """Triton's OpenTelemetry settings, or None when no receiver is set."""
        if not self.trace_otlp_url:
            return None
        return TraceSettings(self.trace_otlp_url, rate=self.trace_rate, service_name=f"{self.model_name}-triton")

    def own_image(self, name: str, digest: str, tag: str | None = None) -> str:
        """An image this project builds, as Kubernetes pulls it: by digest once one is recorded."""
        return f"{self.image_registry}/{name}:{tag or self.image_tag}" + (f"@{digest}" if digest else "")

    @property
    def kubernetes_gpu(self) -> bool:
        return self.kubernetes_stack == "gpu"

    def kubernetes_images(self) -> tuple[str, str]:
        """(builder, Triton) images of the Kubernetes Deployment: the NGC-based pair or the CPU stack's."""
        if self.kubernetes_gpu:
            return (self.own_image(self.builder_image_name, self.builder_image_digest),
                    self.own_image(self.triton_image_name, self.triton_image_digest))
        return (self.own_image(self.builder_cpu_image_name, self.builder_image_digest, self.cpu_image_tag),
                self.own_image(self.triton_cpu_image_name, self.triton_image_digest, self.cpu_image_tag))



_POSITIVE = (
    "max_batch", "input_size", "num_classes", "max_detections", "python_instances", "max_image_bytes",
    "max_image_pixels", "cuda_pool_mib", "locust_workers", "locust_users", "locust_spawn_rate", "replicas", "hpa_min_replicas",
    "hpa_max_replicas", "queue_time_target_ms", "gpus_per_pod", "memory_request_mib", "probe_failures",
    "probe_interval_s", "probe_timeout_s", "exit_timeout_s", "latency_sla_p95_ms", "alert_error_percent",
    "alert_queue_ms", "alert_empty_jump_points", "alert_gpu_memory_percent", "alert_power_percent", "alert_min_per_minute",
)
_PERCENTS = ("alert_error_percent", "alert_empty_jump_points", "alert_gpu_memory_percent", "alert_power_percent")
_PORTS = (
    "http_port", "grpc_port", "metrics_port", "proxy_http_port", "proxy_grpc_port", "proxy_health_port",
    "prometheus_port",
    "grafana_port", "locust_web_port", "locust_master_port", "watchdog_metrics_port",
)


# Images pulled by reference: each must be pinned by tag and digest.
PULLED_IMAGES = ("debian_image", "python_image", "nginx_image", "prometheus_image", "grafana_image")


def _check_images(s: Settings) -> None:
    if release_tuple(s.triton_release) < release_tuple(MIN_TRITON_RELEASE):
        raise SettingsError(
            f"triton_release {s.triton_release} predates the 2025 security fixes; use {MIN_TRITON_RELEASE} or later"
        )
    for key in PULLED_IMAGES:
        if not is_pinned(getattr(s, key)):
            raise SettingsError(
                f"{key} {getattr(s, key)!r} is not pinned: write it as name:tag@sha256:<digest> "
                "(see the refresh command in deploy/settings.py)"
            )
    for key in ("triton_base_digest", "tensorrt_base_digest", "triton_image_digest", "builder_image_digest",
                "loadtest_image_digest"):
        value = getattr(s, key)
        if value and not is_digest(value):
            raise SettingsError(f"{key} {value!r} must be sha256:<64 hex digits> (or empty)")


def _check_model(s: Settings) -> None:
    # The generator's own rules, through the options each builder will run: one source for what is valid.
    for target in BUILD_TARGETS.values():
        try:
            build_options(s, target)
        except SpecError as exc:
            names = [key for key, flag in _setting_flags(s, target).items() if flag in str(exc)] or ["the build"]
            raise SettingsError(f"{', '.join(names)}: {exc}") from exc
    for key in _POSITIVE:
        if getattr(s, key) < 1:
            raise SettingsError(f"{key} must be at least 1, got {getattr(s, key)}")
    if s.input_size % 32:
        raise SettingsError(f"input_size {s.input_size} must be a multiple of 32 (YOLO strides)")
    for key in ("detector_onnx", "validate_images", "validate_labels", "calib_images"):
        value = getattr(s, key)
        if value and (Path(value).is_absolute() or ".." in Path(value).parts):
            raise SettingsError(f"{key} must be a path inside the repository (it is the build context)")
    _check_domain_data(s)


def _check_domain_data(s: Settings) -> None:
    """Your own model is gated (FP16/INT8) and calibrated (INT8) on your images, as `generator build` requires."""
    if s.detector_onnx == DEMO_DETECTOR:
        return
    precisions = {s.precision, s.cpu_precision, s.jetson_build_precision}
    if precisions != {"fp32"} and s.accuracy_gate and not s.validate_images:
        raise SettingsError(f"detector_onnx {s.detector_onnx} is your own model and a {'/'.join(sorted(precisions - {'fp32'}))} "
                            "build runs the accuracy gate: set validate_images (a folder of your domain's images in "
                            "the repository) or accuracy_gate false")
    if "int8" in precisions and not s.calib_images:
        raise SettingsError("precision int8 calibrates on images of your model's domain: set calib_images (a folder "
                            "in the repository)")


# Builder targets by compose service: the GPU stack builds a TensorRT plan, the CPU stack ONNX Runtime.
# The CPU stack serves `--target embedded` repositories on the slim image (Triton 2.51 from the pinned wheel).
BUILD_TARGETS: dict[str, Target] = {"builder": "tensorrt", "builder-cpu": "embedded"}
# The build option each setting decides, by option path; build_options() adds what depends on the target.
SETTING_OPTIONS = {
    "model_name": "name", "max_batch": "max_batch", "max_detections": "max_detections",
    "max_image_bytes": "limits.max_bytes", "max_image_pixels": "limits.max_pixels", "normalise_in": "normalise_in",
    "reduce_head": "reduce_head", "nms_in_graph": "nms_in_graph", "accuracy_gate": "gate.enabled",
}


def _target_options(s: Settings, target: Target) -> dict[str, tuple[str, Any]]:
    """Option path -> (setting, value) for what depends on the target (or on a path inside the image)."""
    gpu = target == "tensorrt"
    options: dict[str, tuple[str, Any]] = {
        "target": ("target", target),
        "precision": ("precision" if gpu else "cpu_precision", s.precision if gpu else s.cpu_precision),
        # The CPU stack always preprocesses on the CPU.
        "preprocess_device": ("preprocess_device", s.preprocess_device if gpu else "cpu"),
        # The GPU stack: python_instances of preprocess and NMS, two detector instances (one's copies overlap the
        # other's compute). The CPU stack takes the generator's own default (two of each step, the detector's each
        # with every core: docs/BUILDING.md); spelling --instances out would split the cores.
        "instances": ("python_instances", (s.python_instances, 2, s.python_instances) if gpu else None),
        "max_queue_ms": ("max_queue_ms", s.max_queue_ms or None),  # 0: derived by the generator
        "calibration.calib_images": ("calib_images", Path(CALIB_IMAGES_PATH) if s.calib_images else None),
        "gate.images": ("validate_images", Path(VALIDATE_IMAGES_PATH) if s.validate_images else None),
        "gate.labels": ("validate_labels", Path(VALIDATE_LABELS_PATH) if s.validate_labels else None),
    }
    if gpu:
        options["tensorrt.triton_image"] = ("triton_release", s.triton_base_image)
        options["tensorrt.version_compatible"] = ("version_compatible", s.version_compatible)
    return options


def _setting_flags(s: Settings, target: Target) -> dict[str, str]:
    """Setting -> the generator flag it becomes (to name the setting when the generator refuses a value)."""
    flags = {".".join(item.path): item.declaration.flag for item in declared(BuildOptions)}
    named = {key: flags[path] for key, path in SETTING_OPTIONS.items()}
    named.update({key: flags[path] for path, (key, _) in _target_options(s, target).items() if key != "target"})
    return named


def build_options(s: Settings, target: Target) -> BuildOptions:
    """What ``generator build`` runs in the builder container for ``target``, validated by the generator itself."""
    values = {path: getattr(s, key) for key, path in SETTING_OPTIONS.items()}
    values.update({path: value for path, (_, value) in _target_options(s, target).items()})
    groups: dict[str, dict[str, Any]] = {}
    for path in [p for p in values if "." in p]:
        group, name = path.split(".", 1)
        groups.setdefault(group, {})[name] = values.pop(path)
    kinds = typing.get_type_hints(BuildOptions)
    return BuildOptions(**values, **{group: kinds[group](**fields) for group, fields in groups.items()})


def _check_network(s: Settings) -> None:
    ports = {k: getattr(s, k) for k in _PORTS}
    for key, port in ports.items():
        if not 1024 <= port <= 65535:
            raise SettingsError(f"{key} {port} must be an unprivileged port (1024-65535)")
    if len(set(ports.values())) != len(ports):
        raise SettingsError(f"ports must be distinct, got {ports}")
    for key in ("bind_address", "proxy_bind_address"):
        try:
            ipaddress.ip_address(getattr(s, key))
        except ValueError as exc:
            raise SettingsError(f"{key} {getattr(s, key)!r} is not an IP address") from exc
    if not ipaddress.ip_address(s.bind_address).is_loopback:
        raise SettingsError(
            f"bind_address {s.bind_address!r} must be loopback: only the TLS proxy faces the network "
            "(set proxy_bind_address)"
        )
    if not _HEADER_RE.fullmatch(s.admin_header):
        raise SettingsError(f"admin_header {s.admin_header!r} must be a lower-case header name")
    if 0 in (s.run_as_uid, s.run_as_gid):
        raise SettingsError("run_as_uid/run_as_gid must not be 0: the containers run as non-root")
    if s.gpu_ulimit_memlock < -1 or s.gpu_ulimit_stack < 0:
        raise SettingsError("gpu_ulimit_memlock must be -1 (unlimited), 0 (not set) or bytes; gpu_ulimit_stack 0 "
                            "(not set) or bytes")
    if s.probe_timeout_s >= s.probe_interval_s:
        raise SettingsError("probe_timeout_s must be shorter than probe_interval_s")


def _check_telemetry(s: Settings) -> None:
    for key in _PERCENTS:
        if not 1 <= getattr(s, key) <= 100:
            raise SettingsError(f"{key} must be 1..100, got {getattr(s, key)}")
    if s.trace_rate < 0:
        raise SettingsError(f"trace_rate must be 0 (only requests with a traceparent) or more, got {s.trace_rate}")
    try:
        s.trace_settings  # noqa: B018 -- validates the URL and the rate
    except TraceSettingsError as exc:
        raise SettingsError(f"trace_otlp_url / trace_rate: {exc}") from exc


def _check_jetson(s: Settings) -> None:
    if release_tuple(s.jetson_release) < release_tuple(MIN_TRITON_RELEASE):
        raise SettingsError(f"jetson_release {s.jetson_release} predates the 2025 security fixes; use "
                            f"{MIN_TRITON_RELEASE} or later")
    if s.jetson_triton_digest and not is_digest(s.jetson_triton_digest):
        raise SettingsError(f"jetson_triton_digest {s.jetson_triton_digest!r} must be sha256:<64 hex digits> (or empty)")
    if not 256 <= s.jetson_workspace_mib <= 65536:
        raise SettingsError(f"jetson_workspace_mib must be within 256..65536, got {s.jetson_workspace_mib}")
    if not 40 <= s.alert_jetson_temperature_celsius <= 110:
        raise SettingsError(f"alert_jetson_temperature_celsius must be within 40..110, got "
                            f"{s.alert_jetson_temperature_celsius}")
    if s.jetson_precision and s.jetson_precision not in PRECISIONS:
        raise SettingsError(f"jetson_precision {s.jetson_precision!r} must be one of {', '.join(PRECISIONS)} (or empty: "
                            "precision's)")
    if not 1 <= s.jetson_max_batch <= 1024:
        raise SettingsError(f"jetson_max_batch must be within 1..1024, got {s.jetson_max_batch}")
    jetson_image_size(s)


def jetson_image_size(s: Settings) -> tuple[int, int] | None:
    """``jetson_image_size`` "HxW" as (height, width); None: the ONNX's own input size."""
    if not s.jetson_image_size:
        return None
    match = re.fullmatch(r"(\d+)x(\d+)", s.jetson_image_size)
    if match is None:
        raise SettingsError(f"jetson_image_size {s.jetson_image_size!r} must look like 384x640 (height x width)")
    size = (int(match.group(1)), int(match.group(2)))
    if any(side < 32 or side % 32 for side in size):
        raise SettingsError(f"jetson_image_size {s.jetson_image_size}: both sides must be multiples of 32 (YOLO strides)")
    return size


def _check_canary(s: Settings) -> None:
    if not 0.0 <= s.canary_percent <= 100.0:
        raise SettingsError(f"canary_percent must be within 0..100, got {s.canary_percent}")
    if s.canary_percent > 0 and not re.fullmatch(rf"{re.escape(s.model_name)}_v[1-9][0-9]*", s.canary_model):
        raise SettingsError(f"canary_percent {s.canary_percent:g} needs canary_model = {s.model_name}_vN, the "
                            f"version under trial (generator rollout), got {s.canary_model!r}")


def _check_kubernetes(s: Settings) -> None:
    for key in ("namespace", "prometheus_namespace", "prometheus_pod_name"):
        if not _DNS_RE.fullmatch(getattr(s, key)):
            raise SettingsError(f"{key} {getattr(s, key)!r} is not a DNS-1123 label")
    if not _K8S_VERSION_RE.fullmatch(s.kubernetes_version):
        raise SettingsError(f"kubernetes_version {s.kubernetes_version!r} must look like '1.33'")
    if not s.hpa_min_replicas <= s.replicas <= s.hpa_max_replicas:
        raise SettingsError("need hpa_min_replicas <= replicas <= hpa_max_replicas")
    if s.hpa_min_replicas < 2:
        raise SettingsError("hpa_min_replicas must be >= 2, or the PodDisruptionBudget blocks every drain")
    if s.kubernetes_stack not in ("gpu", "cpu"):
        raise SettingsError(f"kubernetes_stack {s.kubernetes_stack!r} must be 'gpu' or 'cpu'")
    if s.models_storage_class and not _DNS_RE.fullmatch(s.models_storage_class.replace(".", "-")):
        raise SettingsError(f"models_storage_class {s.models_storage_class!r} is not a StorageClass name")
    if s.models_storage_gib < 1:
        raise SettingsError("models_storage_gib must be at least 1")
    if s.gpu_product and not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", s.gpu_product):
        raise SettingsError(f"gpu_product {s.gpu_product!r} is not a Kubernetes label value")
    if s.locust_protocol not in ("grpc", "http"):
        raise SettingsError(f"locust_protocol {s.locust_protocol!r} must be 'grpc' or 'http'")


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
