"""Every static check of a rendered deploy tree, in one call (used by the CLI and the tests).

No Docker daemon and no cluster are needed: drift against a fresh render, Compose Specification
schema, Kubernetes strict schemas, the hardening policy, the proxy configuration, the package extras
the images install, and the monitoring files' references.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from deploy import policy, validate
from deploy.composefile import load_compose, parse_env
from deploy.errors import CheckError
from deploy.policy import jetson as jetson_policy
from deploy.render.alerts import rule_groups
from deploy.render.dashboard import KNOWN_METRICS, metric_names
from deploy.render.files import K8S_ON_DEMAND_FILES, K8S_RESOURCE_FILES, NGINX_CONF, drift
from deploy.settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent
# Stand-ins for what the committed .env leaves empty on purpose (secrets, the NGC digests), so the file
# can be interpolated for the schema and policy checks. Never used to build or run anything.
CHECK_SECRETS = {
    "TRITON_ADMIN_TOKEN": "check-token",
    "GRAFANA_ADMIN_PASSWORD": "check-password",
    "TRITON_BASE_DIGEST": "sha256:" + "0" * 64,
    "TENSORRT_BASE_DIGEST": "sha256:" + "0" * 64,
    "JETSON_TRITON_DIGEST": "sha256:" + "0" * 64,
}


def compose_problems(deploy_dir: Path, settings: Settings) -> list[str]:
    env = parse_env((deploy_dir / ".env").read_text(encoding="utf-8"))
    text = (deploy_dir / "docker-compose.yml").read_text(encoding="utf-8")
    compose = load_compose(text, {**env, **CHECK_SECRETS})
    return (
        validate.compose_schema_errors(compose)
        + policy.compose_violations(compose, env, settings)
        + policy.compose_text_violations(text)
        + jetson_policy.compose_violations(compose, env, settings, CHECK_SECRETS["TRITON_ADMIN_TOKEN"])
        + jetson_policy.compose_text_violations(text)
        + policy.proxy_violations((deploy_dir / NGINX_CONF).read_text(encoding="utf-8"), settings)
    )


def dockerfile_problems(deploy_dir: Path, settings: Settings) -> list[str]:
    problems = []
    for image in policy.DOCKERFILES:
        path = deploy_dir / "docker" / f"{image}.Dockerfile"
        problems.extend(policy.dockerfile_violations(path.read_text(encoding="utf-8"), image, settings))
    for image in jetson_policy.DOCKERFILES:
        path = deploy_dir / "docker" / f"{image}.Dockerfile"
        problems.extend(jetson_policy.jetson_dockerfile_violations(path.read_text(encoding="utf-8"), image, settings))
    for name in policy.LOCAL_DOCKERFILES:
        path = deploy_dir / "docker" / "local" / f"{name}.Dockerfile"
        problems.extend(policy.local_dockerfile_violations(path.read_text(encoding="utf-8"), f"local/{name}.Dockerfile"))
    return problems


def read_pyproject(path: Path = REPO_ROOT / "pyproject.toml") -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise CheckError("checking pyproject.toml on Python 3.10 needs tomli: pip install tomli") from exc
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CheckError(f"cannot read {path}: {exc}") from exc


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
            unknown = metric_names(target["expr"]) - KNOWN_METRICS
            if unknown:
                problems.append(f"dashboard panel {panel['title']!r} uses unknown metrics {sorted(unknown)}")
    return problems + alert_problems(deploy_dir, settings)


def alert_problems(deploy_dir: Path, settings: Settings) -> list[str]:
    """The rule file is loaded, reads only known metrics, and passes `promtool check rules` where promtool is."""
    import yaml

    path = deploy_dir / "monitoring/prometheus/alerts.yml"
    prom = yaml.safe_load((deploy_dir / "monitoring/prometheus/prometheus.yml").read_text(encoding="utf-8"))
    problems = [] if "alerts.yml" in (prom.get("rule_files") or []) else ["prometheus.yml does not load alerts.yml"]
    groups = yaml.safe_load(path.read_text(encoding="utf-8")).get("groups", [])
    for group in groups:
        for rule in group.get("rules", []):
            unknown = metric_names(rule["expr"]) - KNOWN_METRICS
            if unknown:
                problems.append(f"alert {rule.get('alert')!r} uses unknown metrics {sorted(unknown)}")
    if [g["name"] for g in groups] != [g["name"] for g in rule_groups(settings)]:
        problems.append("alerts.yml does not hold the rule groups of deploy/render/alerts.py")
    return problems + promtool_problems(path)


def promtool_problems(rules: Path) -> list[str]:
    """`promtool check rules` (Debian package prometheus); no promtool here means no check, and says so."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        print("deploy check: promtool not found, alert rules not checked by it (apt-get install prometheus)",
              file=sys.stderr)
        return []
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    return [] if result.returncode == 0 else [f"promtool check rules {rules.name}: {result.stdout}{result.stderr}"]


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
    problems.extend(dockerfile_problems(deploy_dir, settings))
    problems.extend(policy.extras_violations(read_pyproject()))
    problems.extend(k8s_problems(deploy_dir, settings))
    problems.extend(monitoring_problems(deploy_dir, settings))
    return problems
