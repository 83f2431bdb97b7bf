"""Every static check of a rendered deploy tree, in one call (used by the CLI and the tests).

No Docker daemon and no cluster are needed: drift against a fresh render, Compose Specification
schema, Kubernetes strict schemas, the hardening policy, and the monitoring files' references.
"""

from __future__ import annotations

import json
from pathlib import Path

from deploy import policy, validate
from deploy.composefile import load_compose, parse_env
from deploy.dashboard import TRITON_METRICS, metric_names
from deploy.render import K8S_ON_DEMAND_FILES, K8S_RESOURCE_FILES, drift
from deploy.settings import Settings

# Stand-ins for the secrets the committed .env leaves empty, so the file can be interpolated.
CHECK_SECRETS = {"TRITON_ADMIN_TOKEN": "check-token", "GRAFANA_ADMIN_PASSWORD": "check-password"}


def compose_problems(deploy_dir: Path, settings: Settings) -> list[str]:
    env = parse_env((deploy_dir / ".env").read_text(encoding="utf-8"))
    compose = load_compose(
        (deploy_dir / "docker-compose.yml").read_text(encoding="utf-8"), {**env, **CHECK_SECRETS}
    )
    return validate.compose_schema_errors(compose) + policy.compose_violations(compose, env, settings)


def dockerfile_problems(deploy_dir: Path) -> list[str]:
    problems = []
    for name, base in (
        ("triton", "nvcr.io/nvidia/tritonserver"),
        ("builder", "nvcr.io/nvidia/tensorrt"),
        ("loadtest", None),
    ):
        path = deploy_dir / "docker" / f"{name}.Dockerfile"
        problems.extend(policy.dockerfile_violations(path.read_text(encoding="utf-8"), path.name, base))
    return problems


def k8s_problems(deploy_dir: Path, settings: Settings) -> list[str]:
    k8s_dir = deploy_dir / "k8s"
    docs = validate.load_k8s_documents(k8s_dir, (*K8S_RESOURCE_FILES, *K8S_ON_DEMAND_FILES))
    return (
        validate.k8s_schema_errors(docs, settings.kubernetes_version)
        + validate.kustomization_errors(k8s_dir, K8S_RESOURCE_FILES)
        + policy.k8s_violations(docs, settings)
    )


def monitoring_problems(deploy_dir: Path, settings: Settings) -> list[str]:
    import yaml

    problems = []
    prom = yaml.safe_load((deploy_dir / "monitoring/prometheus/prometheus.yml").read_text(encoding="utf-8"))
    targets = [
        t
        for job in prom.get("scrape_configs", [])
        for sc in job.get("static_configs", [])
        for t in sc.get("targets", [])
    ]
    if f"triton:{settings.metrics_port}" not in targets:
        problems.append(f"prometheus.yml does not scrape triton:{settings.metrics_port} (targets {targets})")
    dashboard = json.loads(
        (deploy_dir / "monitoring/grafana/dashboards/triton.json").read_text(encoding="utf-8")
    )
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            unknown = metric_names(target["expr"]) - TRITON_METRICS
            if unknown:
                problems.append(f"dashboard panel {panel['title']!r} uses unknown metrics {sorted(unknown)}")
    return problems


def run_checks(deploy_dir: Path, settings: Settings, *, check_drift: bool = True) -> list[str]:
    """All problems found in ``deploy_dir``; empty means every check passed."""
    problems: list[str] = []
    if check_drift:
        problems.extend(
            f"{rel}: differs from `python -m deploy render` (re-render and commit)"
            for rel in drift(settings, deploy_dir)
        )
        if problems:
            return problems
    problems.extend(compose_problems(deploy_dir, settings))
    problems.extend(dockerfile_problems(deploy_dir))
    problems.extend(k8s_problems(deploy_dir, settings))
    problems.extend(monitoring_problems(deploy_dir, settings))
    return problems
