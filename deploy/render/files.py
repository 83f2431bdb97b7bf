"""Render every deployment file from ``deploy/templates`` and one ``Settings``.

The rendered tree is committed; ``check`` re-renders into a temporary directory and compares, so a
hand edit of a generated file (or a template change that was not re-rendered) is caught.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import commands, jetson, proxy_admission, screening, sizing
from deploy import settings as settings_module
from deploy.errors import RenderError
from deploy.render.alerts import rule_groups
from deploy.render.dashboard import build_dashboard
from deploy.settings import MIN_COMPOSE, MIN_ENGINE, MIN_TRITON_RELEASE, Settings
from generator.server.embedded import TRITON_VERSION
from generator.server.histogram_export import DROP_REGEX

DEPLOY_DIR = Path(__file__).parents[1]  # the rendered files stay where compose and kubectl users find them
TEMPLATE_DIR = DEPLOY_DIR / "templates"

NGINX_CONF = "proxy/nginx.conf"
NGINX_TEMPLATE = "proxy/nginx.conf.j2"
# Both Kubernetes containers sleep this long on termination before they stop accepting, so the endpoint
# controller has taken the pod out of the Service first (the kubelet starts preStop and the removal together).
PRESTOP_SLEEP_S = 5
# Where the load-test containers find the proxy's certificate (its CA for a self-signed one).
LOCUST_CA_PATH = "/etc/locust/ca.crt"


@dataclass(frozen=True)
class Output:
    """One generated file: where it goes (relative to the output directory) and its template."""

    path: str
    template: str
    extra: tuple[tuple[str, str], ...] = ()


OUTPUTS: tuple[Output, ...] = (
    Output(".env", "env.j2"),
    Output("docker-compose.yml", "docker-compose.yml.j2"),
    Output("docker/triton.Dockerfile", "triton.Dockerfile.j2"),
    Output("docker/builder.Dockerfile", "builder.Dockerfile.j2"),
    Output("docker/loadtest.Dockerfile", "loadtest.Dockerfile.j2"),
    Output("docker/triton-cpu.Dockerfile", "triton-cpu.Dockerfile.j2"),
    Output("docker/builder-cpu.Dockerfile", "builder-cpu.Dockerfile.j2"),
    Output("docker/triton-jetson.Dockerfile", "triton-jetson.Dockerfile.j2"),
    Output("docker/builder-jetson.Dockerfile", "builder-jetson.Dockerfile.j2"),
    Output("docker/build-ca.pem", "build-ca.pem.j2"),
    Output("docker/local/python.Dockerfile", "local/python.Dockerfile.j2"),
    Output("docker/local/nginx.Dockerfile", "local/nginx.Dockerfile.j2"),
    Output("docker/local/prometheus.Dockerfile", "local/prometheus.Dockerfile.j2"),
    Output(NGINX_CONF, NGINX_TEMPLATE),
    Output("docker/triton.Dockerfile.dockerignore", "dockerignore.j2", (("image", "triton"),)),
    Output("docker/builder.Dockerfile.dockerignore", "dockerignore.j2", (("image", "builder"),)),
    Output("docker/loadtest.Dockerfile.dockerignore", "dockerignore.j2", (("image", "loadtest"),)),
    Output("docker/triton-cpu.Dockerfile.dockerignore", "dockerignore.j2", (("image", "triton-cpu"),)),
    Output("docker/builder-cpu.Dockerfile.dockerignore", "dockerignore.j2", (("image", "builder-cpu"),)),
    Output("docker/triton-jetson.Dockerfile.dockerignore", "dockerignore.j2", (("image", "triton-jetson"),)),
    Output("docker/builder-jetson.Dockerfile.dockerignore", "dockerignore.j2", (("image", "builder-jetson"),)),
    Output("k8s/kustomization.yaml", "k8s/kustomization.yaml.j2"),
    Output("k8s/namespace.yaml", "k8s/namespace.yaml.j2"),
    Output("k8s/deployment.yaml", "k8s/deployment.yaml.j2"),
    Output("k8s/service.yaml", "k8s/service.yaml.j2"),
    Output("k8s/networkpolicy.yaml", "k8s/networkpolicy.yaml.j2"),
    Output("k8s/proxy-config.yaml", "k8s/proxy-config.yaml.j2"),
    Output("k8s/hpa.yaml", "k8s/hpa.yaml.j2"),
    Output("k8s/pdb.yaml", "k8s/pdb.yaml.j2"),
    Output("k8s/servicemonitor.yaml", "k8s/servicemonitor.yaml.j2"),
    Output("k8s/prometheusrule.yaml", "k8s/prometheusrule.yaml.j2"),
    Output("k8s/prometheus-adapter-rules.yaml", "k8s/prometheus-adapter-rules.yaml.j2"),
    Output("k8s/pvc.yaml", "k8s/pvc.yaml.j2"),
    Output("k8s/admin-service.yaml", "k8s/admin-service.yaml.j2"),
    Output("k8s/build-job.yaml", "k8s/build-job.yaml.j2"),
    Output("k8s/rollout-job.yaml", "k8s/rollout-job.yaml.j2", (("rollback", ""),)),
    Output("k8s/rollback-job.yaml", "k8s/rollout-job.yaml.j2", (("rollback", "1"),)),
    Output("k8s/locust.yaml", "k8s/locust.yaml.j2"),
    Output("monitoring/prometheus/prometheus.yml", "monitoring/prometheus.yml.j2"),
    Output("monitoring/prometheus/alerts.yml", "monitoring/alerts.yml.j2"),
    Output("monitoring/grafana/provisioning/datasources/prometheus.yml", "monitoring/datasource.yml.j2"),
    Output("monitoring/grafana/provisioning/dashboards/provider.yml", "monitoring/dashboard-provider.yml.j2"),
    Output("monitoring/grafana/dashboards/triton.json", "monitoring/dashboard.json.j2"),
)

# Applied by `kubectl apply -k`; the load-test Jobs are applied on purpose, never with every deploy.
# So are the one-shot Jobs of the versioned repository: the build (first, and for every new version) and the rollout.
K8S_ON_DEMAND_FILES = ("locust.yaml", "build-job.yaml", "rollout-job.yaml", "rollback-job.yaml")
K8S_RESOURCE_FILES = tuple(
    name
    for name in (o.path.removeprefix("k8s/") for o in OUTPUTS if o.path.startswith("k8s/"))
    if name != "kustomization.yaml" and name not in K8S_ON_DEMAND_FILES
)

HPA_METRIC_NAME = "triton_queue_ms_per_request"


def adapter_metrics_query(settings: Settings) -> str:
    """prometheus-adapter query: composing-model queue time per ensemble request, in ms, per pod.

    ``<<.LabelMatchers>>``/``<<.GroupBy>>`` are the adapter's own template fields. The denominator
    is clamped so an idle pod reports 0 instead of NaN (which would drop the metric).
    """
    comp = settings.step_regex()  # every version's steps (the stack serves a versioned repository)
    return (
        f'sum by (<<.GroupBy>>) (rate(nv_inference_queue_duration_us{{<<.LabelMatchers>>,model=~"{comp}"}}[2m])) / 1000'
        f" / clamp_min(sum by (<<.GroupBy>>) (rate(nv_inference_request_success"
        f'{{<<.LabelMatchers>>,model="{settings.model_name}"}}[2m])), 0.001)'
    )


def locust_host(settings: Settings, service: str) -> str:
    """URL the Locust users target: the TLS proxy, like every client; the scheme picks gRPC or HTTP."""
    if settings.locust_protocol == "grpc":
        return f"grpcs://{service}:{settings.proxy_grpc_port}"
    return f"https://{service}:{settings.proxy_http_port}"


def _yaml(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)).rstrip("\n")


def context(settings: Settings, nginx_conf: str = "") -> dict[str, Any]:
    """Everything a template may use; StrictUndefined turns any other name into an error."""
    shm = sizing.shm_breakdown(settings, settings.kubernetes_stack == "gpu")  # the Kubernetes Deployment's
    groups = rule_groups(settings)
    timing = commands.stop_timing(settings)
    return {
        "s": settings,
        "shm": shm,
        "shm_size_mib": shm.total_mib,
        "max_request_bytes": sizing.max_request_bytes(settings),
        "fd": screening.context(settings),  # the front door's screening rules (issue 37)
        "pod_memory_limit_mib": sizing.pod_memory_limit_mib(settings),
        "min_triton_release": MIN_TRITON_RELEASE,
        "compose_token": "${TRITON_ADMIN_TOKEN:?set TRITON_ADMIN_TOKEN (see deploy/README.md)}",
        "k8s_token": "$(TRITON_ADMIN_TOKEN)",
        "serve_command": commands.serve_command,
        "builder_command": commands.builder_command,
        "image_extras": commands.image_extras,
        "build_targets": settings_module.BUILD_TARGETS,
        "probe_command": commands.probe_command(settings),
        "proxy_health_command": commands.proxy_health_command(settings),
        "proxy_health_path": commands.PROXY_HEALTH_PATH,
        "shm_for": lambda gpu: sizing.shm_breakdown(settings, gpu),
        "triton_version": TRITON_VERSION,
        "server_cache": commands.SERVER_CACHE,
        "min_engine": ".".join(map(str, MIN_ENGINE)),
        "min_compose": ".".join(map(str, MIN_COMPOSE)),
        "models_volume": commands.MODELS_VOLUME,
        "routing_dir": commands.ROUTING_DIR,
        "canary_buckets": commands.CANARY_BUCKETS,
        "rollout_command": commands.rollout_command(settings),
        "k8s_rollout_command": commands.k8s_rollout_command(settings),
        "k8s_http_address": commands.K8S_HTTP_ADDRESS,
        "models_claim": commands.MODELS_CLAIM,
        "admin_service": commands.ADMIN_SERVICE,
        "rollout_pod_name": commands.ROLLOUT_POD_NAME,
        "admin_token_file": commands.ADMIN_TOKEN_FILE,
        "watchdog_path": commands.WATCHDOG_PATH,
        "gpu_metrics_path": commands.GPU_METRICS_PATH,
        "histogram_export_path": commands.HISTOGRAM_EXPORT_PATH,
        "histogram_drop_regex": DROP_REGEX,
        "detector_onnx_path": settings_module.DETECTOR_ONNX_PATH,
        "validate_images_path": settings_module.VALIDATE_IMAGES_PATH,
        "validate_labels_path": settings_module.VALIDATE_LABELS_PATH,
        "calib_images_path": settings_module.CALIB_IMAGES_PATH,
        "exit_timeout_s": timing.exit_timeout_s,
        "watchdog_grace_s": timing.watchdog_grace_s,
        "container_grace_s": timing.container_grace_s,
        "locust_ca_path": LOCUST_CA_PATH,
        "pod_grace_s": timing.container_grace_s + PRESTOP_SLEEP_S,
        "prestop_sleep_s": PRESTOP_SLEEP_S,
        **proxy_admission.template_context(),
        "nginx_conf": nginx_conf,
        "nginx_conf_sha256": hashlib.sha256(nginx_conf.encode()).hexdigest(),
        "k8s_resource_files": K8S_RESOURCE_FILES,
        "hpa_metric_name": HPA_METRIC_NAME,
        "adapter_metrics_query": adapter_metrics_query(settings),
        "locust_host": locust_host(settings, "triton"),
        # User classes defined in loadtest/locustfile.py.
        "locust_user_class": "GrpcDetectionUser" if settings.locust_protocol == "grpc" else "HttpDetectionUser",
        "locust_host_k8s": locust_host(settings, f"triton.{settings.namespace}.svc"),
        "dashboard_json": json.dumps(build_dashboard(settings), indent=2, sort_keys=False),
        "alert_rules_yaml": _yaml({"groups": groups}),
        "alert_groups_yaml": _yaml({"groups": groups}),
        "watchdog_state": commands.WATCHDOG_STATE,
        "tojson": json.dumps,
        "jetson": jetson,
    }


def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_all(settings: Settings) -> dict[str, str]:
    """Map of relative output path -> rendered text. The proxy config goes first: Kubernetes embeds it."""
    import jinja2

    env = _environment()
    rendered: dict[str, str] = {}
    try:
        rendered[NGINX_CONF] = env.get_template(NGINX_TEMPLATE).render(**context(settings))
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {NGINX_TEMPLATE}: {exc}") from exc
    base = context(settings, rendered[NGINX_CONF])
    for output in OUTPUTS:
        if output.path == NGINX_CONF:
            continue
        try:
            rendered[output.path] = env.get_template(output.template).render(**base, **dict(output.extra))
        except jinja2.TemplateError as exc:
            raise RenderError(f"template {output.template}: {exc}") from exc
    return rendered


def write_rendered(rendered: dict[str, str], out_dir: Path) -> list[Path]:
    """Write the rendered files under ``out_dir``; shell scripts get the executable bit."""
    written = []
    for rel, text in rendered.items():
        path = out_dir / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if path.suffix == ".sh":
                path.chmod(0o755)
        except OSError as exc:
            raise RenderError(f"cannot write {path}: {exc}") from exc
        written.append(path)
    return written


def drift(settings: Settings, committed_dir: Path) -> list[str]:
    """Relative paths whose committed content differs from a fresh render (missing counts as drift)."""
    differing = []
    for rel, text in render_all(settings).items():
        path = committed_dir / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            differing.append(rel)
    return differing
