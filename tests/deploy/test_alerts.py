"""The alert rules as rendered: promtool accepts them, they cover what issue 19 asks, thresholds come from
Settings, and Kubernetes gets the same groups. tests/integration/test_alert_rules.py fires them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.checks import alert_problems
from deploy.errors import SettingsError
from deploy.render.alerts import alert_rules, metric_names, rule_groups
from deploy.render.dashboard import KNOWN_METRICS
from deploy.settings import Settings, apply_overrides
from tests.deploy.helpers import find_doc

EXPECTED = {
    "TritonEnsembleErrorRate", "TritonEnsembleLatencyP95OverSla", "TritonEnsembleQueueTime",
    "EnsembleEmptyOutputShareJump", "TritonStubRestarted", "GpuMemoryNearFull", "GpuPowerThrottling",
    "GpuThermalThrottling", "GpuSaturatedLatencyRising", "JetsonTemperatureHigh",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: `apt-get install prometheus` (.ci/run installs it)")
    return path


def test_promtool_accepts_the_rendered_rules(rendered_dir: Path) -> None:
    rules = rendered_dir / "monitoring/prometheus/alerts.yml"
    result = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(EXPECTED)} rules found" in result.stdout


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """The check can fail: a rule whose PromQL does not parse."""
    groups = rule_groups(Settings())
    groups[0]["rules"][0]["expr"] = groups[0]["rules"][0]["expr"].replace(")", "", 1)
    broken = tmp_path / "alerts.yml"
    broken.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([promtool(), "check", "rules", str(broken)], capture_output=True, text=True, check=False)
    assert result.returncode != 0
    problems = alert_problems_for(tmp_path, broken)
    assert any("promtool check rules" in p for p in problems)


def alert_problems_for(root: Path, rules: Path) -> list[str]:
    (root / "monitoring/prometheus").mkdir(parents=True)
    (root / "monitoring/prometheus/prometheus.yml").write_text("rule_files: [alerts.yml]\n")
    rules.rename(root / "monitoring/prometheus/alerts.yml")
    return alert_problems(root, Settings())


def test_rules_cover_the_issue_and_read_only_known_metrics() -> None:
    alerts = alert_rules(Settings())
    assert {a.name for a in alerts} == EXPECTED
    for alert in alerts:
        assert metric_names(alert.expr) and metric_names(alert.expr) <= KNOWN_METRICS, alert.name
        assert alert.severity in ("warning", "critical") and alert.summary and alert.description


def test_thresholds_follow_the_settings() -> None:
    custom = apply_overrides(Settings(), {"latency_sla_p95_ms": "80", "alert_error_percent": "5",
                                          "alert_queue_ms": "7", "alert_empty_jump_points": "35",
                                          "alert_gpu_memory_percent": "95", "alert_power_percent": "99",
                                          "model_name": "cams", "alert_min_per_minute": "30"})
    exprs = {a.name: a.expr for a in alert_rules(custom)}
    # The ratio and latency alerts: "(condition) and on() (traffic >= floor)", the condition first.
    conditions = {name: expr.split(") and on() (", 1)[0] for name, expr in exprs.items()}
    assert conditions["TritonEnsembleLatencyP95OverSla"].endswith("> 80") and 'model="cams"' in exprs["TritonEnsembleLatencyP95OverSla"]
    assert conditions["TritonEnsembleErrorRate"].endswith("> 0.05")
    assert conditions["TritonEnsembleQueueTime"].endswith("> 7") and "cams(_v[0-9]+)?_(preprocess|detector|nms)" in exprs["TritonEnsembleQueueTime"]
    assert conditions["EnsembleEmptyOutputShareJump"].endswith("> 0.35") and 'model=~"cams(_v[0-9]+)?_nms"' in exprs["EnsembleEmptyOutputShareJump"]
    for name in ("TritonEnsembleLatencyP95OverSla", "TritonEnsembleErrorRate", "TritonEnsembleQueueTime",
                 "EnsembleEmptyOutputShareJump"):
        assert exprs[name].endswith(">= 0.5)"), name
    assert exprs["GpuMemoryNearFull"].endswith("> 0.95") and exprs["GpuPowerThrottling"].endswith("> 0.99")
    with pytest.raises(SettingsError, match=r"alert_error_percent must be 1\.\.100"):
        apply_overrides(Settings(), {"alert_error_percent": "150"})


def test_compose_prometheus_loads_the_rules_and_kubernetes_gets_the_same_groups(rendered_dir: Path, compose,
                                                                                k8s_docs) -> None:
    rules = yaml.safe_load((rendered_dir / "monitoring/prometheus/alerts.yml").read_text())
    prom = yaml.safe_load((rendered_dir / "monitoring/prometheus/prometheus.yml").read_text())
    assert prom["rule_files"] == ["alerts.yml"]
    mounts = {v["target"] for v in compose["services"]["prometheus"]["volumes"]}
    assert "/etc/prometheus/alerts.yml" in mounts
    assert find_doc(k8s_docs, "PrometheusRule", "triton")["spec"]["groups"] == rules["groups"]
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs["triton-watchdog"]["static_configs"][0]["targets"] == ["triton:8003"]
