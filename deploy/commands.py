"""The command lines the containers run, built once for compose, Kubernetes, the policy and the tests.

Layout inside the containers:

    /models                 the volume (compose) or emptyDir (Kubernetes) the builder fills
    /models/current         symlink to the repository Triton serves: the versioned repository /models/versions
    /models/routing         the rollout's split: routing.json for clients, the proxy's canary buckets
    /opt/deploy/watchdog.py generator/server/watchdog.py, standard library only: probe and supervisor
    /opt/detector/model.onnx the detector baked into the builder image
"""

from __future__ import annotations

from deploy import sizing
from deploy.settings import DETECTOR_ONNX_PATH, Settings, build_options
from generator.builder.spec.declarations import to_flags
from generator.builder.spec.options import Target
from generator.server.hardening import AdminAccess
from generator.server.shutdown import StopTiming

MODELS_VOLUME = "/models"
CURRENT_LINK = "current"
MODEL_REPOSITORY = f"{MODELS_VOLUME}/{CURRENT_LINK}"
# Where the rollout publishes its split (deploy/entrypoints/routing.py): inside the volume, read-only in the proxy.
ROUTING_DIR = f"{MODELS_VOLUME}/routing"
CANARY_BUCKETS = 100  # the proxy's split, one bucket per percent (deploy/entrypoints/routing.py)
# The admin token as a file (a compose secret, a Kubernetes Secret volume): what the rollout reads.
ADMIN_TOKEN_FILE = "/run/secrets/admin_token"
WATCHDOG_PATH = "/opt/deploy/watchdog.py"
GPU_METRICS_PATH = "/opt/deploy/gpu_metrics.py"  # imported by the watchdog from beside it
HISTOGRAM_EXPORT_PATH = "/opt/deploy/histogram_export.py"  # likewise
# The watchdog's counters across its container's restarts: /tmp is the pod's emptyDir in Kubernetes (kept
# while the pod lives); compose's tmpfs starts empty again, and the alert then sees the start time change.
WATCHDOG_STATE = "/tmp/watchdog/state.json"
LOOPBACK = "127.0.0.1"
# Kubernetes: the versioned repository on one ReadWriteMany claim (the build Job writes it, the pods read it), and
# the headless Service that resolves to every Triton pod, for the rollout Job only.
MODELS_CLAIM = "triton-models"
ADMIN_SERVICE = "triton-admin"
K8S_HTTP_ADDRESS = "0.0.0.0"
ROLLOUT_POD_NAME = "triton-rollout"  # the rollout Job's pods' app.kubernetes.io/name, admitted by the policy
# A lost Python-backend stub never comes back (the backend stopped restarting stubs in 24.06): the watchdog starts
# a fresh tritonserver in the same container, which loads in seconds; anything else (tritonserver exited, probes
# failing) exits the container for its restart policy. The unhealthy server gets this long after SIGTERM.
RESTART_IN_PLACE = ("stub_exited", "dead_stub")
RESTART_GRACE_S = 5
# The CPU stack's image: Triton 2.51 from the pinned nvidia-pytriton wheel, prepared at image build time by
# `python -m generator serve --prepare` into this cache (TRITON_DETECTION_CACHE); /opt/tritonserver links to it,
# so tritonserver finds its backends where it looks by default.
SERVER_CACHE = "/opt/tde"
# The project's package extras each image installs (pyproject.toml), nothing more.
# The slim CPU image installs none: its models run in the stub environment locked in generator/server/locks/.
# The builders' images also run the rollout's one-shot container (deploy/entrypoints/rollout_job.py): the `rollout` extra is the
# `build` extra plus the clients (mirrored control images) and a parser for Triton's metrics.
IMAGE_EXTRAS = {"triton": ("serve",), "builder": ("rollout",), "loadtest": ("loadtest",), "triton-cpu": (),
                "builder-cpu": ("rollout",), "triton-jetson": ("serve",), "builder-jetson": ("build",)}


def image_extras(settings: Settings, image: str) -> tuple[str, ...]:
    """Extras of ``image``; the GPU preprocess adds ``gpu`` where it runs and where `generator check` verifies it."""
    gpu = ("gpu",) if settings.preprocess_device == "gpu" and image in ("triton", "builder") else ()
    return IMAGE_EXTRAS[image] + gpu


def stop_timing(settings: Settings) -> StopTiming:
    """tritonserver's drain < the watchdog's grace < the container runtime's grace (shutdown.py)."""
    return StopTiming(exit_timeout_s=settings.exit_timeout_s)


def triton_args(settings: Settings, *, gpu: bool, token: str, http_address: str = LOOPBACK) -> list[str]:
    """The tritonserver command line shared by compose and Kubernetes.

    ``gpu``: the NGC image's tritonserver; otherwise the slim CPU image's Triton 2.51, which has no
    ``--http-max-input-size`` (2.59+; the proxy enforces the same limit on both protocols) and no GPU metrics.
    HTTP and gRPC listen on loopback only: the TLS proxy in the same network namespace is the way in. On
    Kubernetes HTTP listens on the pod's address too (``http_address`` ``0.0.0.0``) for the rollout Job, which the
    NetworkPolicy alone admits to it (the admin APIs still need the token); gRPC stays on loopback.
    Metrics listen on every interface of the container for Prometheus. ``token`` is how the runtime
    spells the admin token: ``${TRITON_ADMIN_TOKEN...}`` in compose, ``$(TRITON_ADMIN_TOKEN)`` in
    Kubernetes; the value itself is never rendered.
    """
    restricted = AdminAccess(token=token, header=settings.admin_header, groups=settings.restricted_api_groups)
    return [
        "tritonserver",
        f"--model-repository={MODEL_REPOSITORY}",
        # Explicit model control: Triton loads the alias (the stable version) at start, and the rollout loads a
        # candidate beside it, promotes it or unloads it through the admin API (docs/UPDATING.md).
        "--model-control-mode=explicit",
        f"--load-model={settings.model_name}",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-on-error=true",
        *stop_timing(settings).server_args(),
        f"--http-address={http_address}",
        f"--http-port={settings.http_port}",
        f"--grpc-address={LOOPBACK}",
        f"--grpc-port={settings.grpc_port}",
        "--metrics-address=0.0.0.0",
        f"--metrics-port={settings.metrics_port}",
        *([f"--http-max-input-size={sizing.max_request_bytes(settings)}"] if gpu else []),
        "--allow-sagemaker=false",
        "--allow-vertex-ai=false",
        *restricted.server_args(),
        "--metrics-config=summary_latencies=true",
        f"--allow-gpu-metrics={'true' if gpu else 'false'}",
        *(settings.trace_settings.server_args() if settings.trace_settings else []),
        *(cuda_pool_args(settings) if gpu else []),
        "--log-verbose=0",
    ]


def cuda_pool_args(settings: Settings) -> list[str]:
    """The GPU preprocess hands the detector GPU tensors: size Triton's CUDA memory pool on every GPU."""
    if settings.preprocess_device != "gpu":
        return []
    size = settings.cuda_pool_mib * 1024 * 1024
    return [f"--cuda-memory-pool-byte-size={gpu}:{size}" for gpu in range(settings.gpus_per_pod)]


def probe_command(settings: Settings) -> list[str]:
    """One real inference at priority 1 plus readiness: liveness, readiness and the compose healthcheck."""
    return [
        "python3", WATCHDOG_PATH, "probe",
        "--url", f"{LOOPBACK}:{settings.http_port}",
        "--model", settings.model_name,
        "--timeout-s", str(settings.probe_timeout_s),
    ]


# The proxy's loopback-only health endpoint (proxy/nginx.conf): Triton's readiness through nginx's upstream.
PROXY_HEALTH_PATH = "/healthz"


def proxy_health_command(settings: Settings) -> list[str]:
    """The proxy's health check: wget is in both the nginx image (busybox) and the local stand-in."""
    url = f"http://{LOOPBACK}:{settings.proxy_health_port}{PROXY_HEALTH_PATH}"
    return ["wget", "-q", "-O", "/dev/null", "-T", str(settings.probe_timeout_s), url]


def serve_command(settings: Settings, *, gpu: bool, token: str, http_address: str = LOOPBACK) -> list[str]:
    """The Triton container's command: check the repository, then run tritonserver under the watchdog."""
    return [
        "python3", "-m", "deploy.entrypoints.serve_models",
        f"--repository={MODEL_REPOSITORY}",
        f"--watchdog={WATCHDOG_PATH}",
        f"--url={LOOPBACK}:{settings.http_port}",
        f"--model={settings.model_name}",
        f"--failures={settings.probe_failures}",
        f"--interval-s={settings.probe_interval_s}",
        f"--timeout-s={settings.probe_timeout_s}",
        f"--grace-s={stop_timing(settings).watchdog_grace_s}",
        f"--watchdog-metrics-port={settings.watchdog_metrics_port}",
        f"--watchdog-state={WATCHDOG_STATE}",
        f"--restart-on={','.join(RESTART_IN_PLACE)}",
        f"--restart-grace-s={RESTART_GRACE_S}",
        "--",
        *triton_args(settings, gpu=gpu, token=token, http_address=http_address),
    ]


# The options a deployment decides, spelled out in the builder's command even where they equal the generator's
# defaults; everything else is left to the generator.
SPELLED_OUT = ("name", "target", "precision", "max_batch", "max_detections", "limits.max_bytes", "limits.max_pixels",
               "normalise_in", "max_queue_ms", "instances", "preprocess_device")


def build_args(settings: Settings, target: Target, onnx: str = DETECTOR_ONNX_PATH) -> list[str]:
    """``generator build`` flags for ``target`` (the builder adds ``--output``), from the option declarations."""
    spelled_out = (*SPELLED_OUT, "tensorrt.triton_image") if target == "tensorrt" else SPELLED_OUT
    return ["--onnx", onnx, *to_flags(build_options(settings, target), always=spelled_out)]


def builder_command(settings: Settings, target: Target) -> list[str]:
    """The builder container's arguments (its entry point is ``python3 -m deploy.entrypoints.build_models``)."""
    return [f"--volume={MODELS_VOLUME}", f"--link={CURRENT_LINK}", "--versioned", "--", *build_args(settings, target)]


def rollout_command(settings: Settings) -> list[str]:
    """The rollout's one-shot container (entry point ``python3 -m deploy.entrypoints.rollout_job``), in the pod's network
    namespace: Triton's admin API and metrics on its loopback, never through the proxy; the token from a file."""
    return [
        f"--model-repository={MODEL_REPOSITORY}",
        f"--url={LOOPBACK}:{settings.http_port}",
        f"--metrics-url={LOOPBACK}:{settings.metrics_port}",
        f"--infer-url=grpc://{LOOPBACK}:{settings.grpc_port}",
        f"--admin-token-file={ADMIN_TOKEN_FILE}",
        f"--routing-dir={ROUTING_DIR}",
    ]


def k8s_rollout_command(settings: Settings) -> list[str]:
    """The rollout Job's arguments: every Triton pod behind the headless Service, over the pods' network (admitted
    to Triton's HTTP and metrics ports from the Job's pods only), never through the proxy; the token from a file."""
    host = f"{ADMIN_SERVICE}.{settings.namespace}.svc"
    return [
        f"--model-repository={MODEL_REPOSITORY}",
        f"--fleet={host}",
        f"--url={host}:{settings.http_port}",
        f"--metrics-url={host}:{settings.metrics_port}",
        f"--infer-url=http://{host}:{settings.http_port}",
        f"--admin-token-file={ADMIN_TOKEN_FILE}",
        f"--routing-dir={ROUTING_DIR}",
    ]
