"""Render every deployment file from ``deploy/templates`` and one ``Settings``.

The rendered tree is committed; ``check`` re-renders into a temporary directory and compares, so a
hand edit of a generated file (or a template change that was not re-rendered) is caught.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import sizing
from deploy.dashboard import build_dashboard
from deploy.errors import RenderError
from deploy.settings import MIN_TRITON_RELEASE, Settings
from generator.serving.gpu.environment import REQUIREMENTS as GPU_PREPROCESS_REQUIREMENTS

TEMPLATE_DIR = Path(__file__).parent / "templates"
DEPLOY_DIR = Path(__file__).parent

# Same pins as pyproject.toml: the preprocess/NMS model.py files import these inside Triton.
PYTHON_MODEL_REQUIREMENTS = ("numpy>=1.24,<2", "opencv-python-headless>=4.8,<4.12")


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
    Output("docker/build-models.sh", "build-models.sh.j2"),
    Output("docker/triton.Dockerfile.dockerignore", "dockerignore.j2", (("image", "triton"),)),
    Output("docker/builder.Dockerfile.dockerignore", "dockerignore.j2", (("image", "builder"),)),
    Output("docker/loadtest.Dockerfile.dockerignore", "dockerignore.j2", (("image", "loadtest"),)),
    Output("k8s/kustomization.yaml", "k8s/kustomization.yaml.j2"),
    Output("k8s/namespace.yaml", "k8s/namespace.yaml.j2"),
    Output("k8s/deployment.yaml", "k8s/deployment.yaml.j2"),
    Output("k8s/service.yaml", "k8s/service.yaml.j2"),
    Output("k8s/hpa.yaml", "k8s/hpa.yaml.j2"),
    Output("k8s/pdb.yaml", "k8s/pdb.yaml.j2"),
    Output("k8s/servicemonitor.yaml", "k8s/servicemonitor.yaml.j2"),
    Output("k8s/prometheus-adapter-rules.yaml", "k8s/prometheus-adapter-rules.yaml.j2"),
    Output("k8s/locust.yaml", "k8s/locust.yaml.j2"),
    Output("monitoring/prometheus/prometheus.yml", "monitoring/prometheus.yml.j2"),
    Output("monitoring/grafana/provisioning/datasources/prometheus.yml", "monitoring/datasource.yml.j2"),
    Output("monitoring/grafana/provisioning/dashboards/provider.yml", "monitoring/dashboard-provider.yml.j2"),
    Output("monitoring/grafana/dashboards/triton.json", "monitoring/dashboard.json.j2"),
)

# Applied by `kubectl apply -k`; the load-test Jobs are applied on purpose, never with every deploy.
K8S_ON_DEMAND_FILES = ("locust.yaml",)
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
    comp = "|".join(settings.composing_models)
    return (
        f'sum by (<<.GroupBy>>) (rate(nv_inference_queue_duration_us{{<<.LabelMatchers>>,model=~"{comp}"}}[2m])) / 1000'
        f" / clamp_min(sum by (<<.GroupBy>>) (rate(nv_inference_request_success"
        f'{{<<.LabelMatchers>>,model="{settings.model_name}"}}[2m])), 0.001)'
    )


def locust_host(settings: Settings, service: str) -> str:
    """URL the Locust users target; the scheme picks their Triton client (gRPC or HTTP)."""
    port = settings.grpc_port if settings.locust_protocol == "grpc" else settings.http_port
    return f"{settings.locust_protocol}://{service}:{port}"


def triton_args(settings: Settings, *, gpu: bool, token: str) -> list[str]:
    """The tritonserver command line shared by compose and Kubernetes.

    ``token`` is how the runtime spells the admin token: ``${TRITON_ADMIN_TOKEN...}`` in compose,
    ``$(TRITON_ADMIN_TOKEN)`` in Kubernetes; the value itself is never rendered.
    """
    groups = ",".join(settings.restricted_api_groups)
    restriction = f"{groups}:{settings.admin_header}={token}"
    return [
        "tritonserver",
        "--model-repository=/models",
        "--model-control-mode=none",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--http-port={settings.http_port}",
        f"--grpc-port={settings.grpc_port}",
        f"--metrics-port={settings.metrics_port}",
        f"--http-max-input-size={sizing.http_max_input_bytes(settings)}",
        "--allow-sagemaker=false",
        "--allow-vertex-ai=false",
        f"--http-restricted-api={restriction}",
        f"--grpc-restricted-protocol={restriction}",
        "--metrics-config=summary_latencies=true",
        f"--allow-gpu-metrics={'true' if gpu else 'false'}",
        "--log-verbose=0",
    ]


def healthcheck_args(settings: Settings) -> list[str]:
    return [
        "python3",
        "/opt/deploy/healthcheck.py",
        "--url",
        f"127.0.0.1:{settings.http_port}",
        "--ensemble",
        settings.model_name,
        "--models",
        ",".join(settings.composing_models),
    ]


def context(settings: Settings) -> dict[str, Any]:
    """Everything a template may use; StrictUndefined turns any other name into an error."""
    shm = sizing.shm_breakdown(settings)
    return {
        "s": settings,
        "shm": shm,
        "shm_size_mib": shm.total_mib,
        "http_max_input_bytes": sizing.http_max_input_bytes(settings),
        "pod_memory_limit_mib": sizing.pod_memory_limit_mib(settings),
        "min_triton_release": MIN_TRITON_RELEASE,
        "python_model_requirements": PYTHON_MODEL_REQUIREMENTS,
        "gpu_preprocess_requirements": GPU_PREPROCESS_REQUIREMENTS,
        "compose_token": "${TRITON_ADMIN_TOKEN:?set TRITON_ADMIN_TOKEN (see deploy/README.md)}",
        "k8s_token": "$(TRITON_ADMIN_TOKEN)",
        "triton_args": triton_args,
        "healthcheck_args": healthcheck_args(settings),
        "k8s_resource_files": K8S_RESOURCE_FILES,
        "hpa_metric_name": HPA_METRIC_NAME,
        "adapter_metrics_query": adapter_metrics_query(settings),
        "locust_host": locust_host(settings, "triton"),
        # User classes defined in loadtest/locustfile.py.
        "locust_user_class": "GrpcDetectionUser" if settings.locust_protocol == "grpc" else "HttpDetectionUser",
        "locust_host_k8s": locust_host(settings, f"triton.{settings.namespace}.svc"),
        "dashboard_json": json.dumps(build_dashboard(settings), indent=2, sort_keys=False),
        "tojson": json.dumps,
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
    """Map of relative output path -> rendered text."""
    import jinja2

    env = _environment()
    base = context(settings)
    rendered: dict[str, str] = {}
    for output in OUTPUTS:
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
