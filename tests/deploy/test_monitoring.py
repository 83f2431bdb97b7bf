"""Prometheus and Grafana provisioning: the dashboard shows what issue #5 asks for, with real metric names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.checks import monitoring_problems
from deploy.render.dashboard import KNOWN_METRICS, build_dashboard, metric_names
from deploy.settings import Settings


@pytest.fixture()
def dashboard(rendered_dir: Path) -> dict[str, Any]:
    return json.loads((rendered_dir / "monitoring/grafana/dashboards/triton.json").read_text())


def _exprs(dashboard: dict[str, Any], title_part: str) -> list[str]:
    panels = [p for p in dashboard["panels"] if title_part.lower() in p["title"].lower()]
    assert panels, f"no panel titled *{title_part}*"
    return [t["expr"] for p in panels for t in p["targets"]]


def test_dashboard_covers_rate_latency_queue_failures_and_gpu(dashboard: dict[str, Any], settings: Settings) -> None:
    assert any("nv_inference_request_success" in e for e in _exprs(dashboard, "request rate"))
    latency = _exprs(dashboard, "latency p50")
    for q in ("0.5", "0.95", "0.99"):
        assert any(f'quantile="{q}"' in e and "nv_inference_request_summary_us" in e for e in latency)
    queue = _exprs(dashboard, "queue time per composing model")
    # Every version's steps (the stack serves a versioned repository): yolo_v1_nms, yolo_v2_nms, a classic yolo_nms.
    assert any(f'model=~"{settings.step_regex()}"' in e and "nv_inference_queue_duration_us" in e for e in queue)
    assert any("nv_inference_request_failure" in e for e in _exprs(dashboard, "failures"))
    assert any("gpu_utilization_ratio" in e for e in _exprs(dashboard, "GPU utilisation"))
    assert any("gpu_memory_used_bytes" in e for e in _exprs(dashboard, "GPU memory"))
    assert any("gpu_memory_peak_bytes" in e for e in _exprs(dashboard, "GPU memory"))
    power = " ".join(_exprs(dashboard, "GPU power"))
    assert all(name in power for name in ("gpu_power_watts", "gpu_power_limit_watts", "gpu_temperature_celsius",
                                          "gpu_energy_joules_total"))
    assert any("triton_watchdog_restarts_total" in e for e in _exprs(dashboard, "Watchdog restarts"))


def test_dashboard_shows_the_quality_telemetry_per_version(dashboard: dict[str, Any], settings: Settings) -> None:
    nms, pre = f'model=~"{settings.step_regex("nms")}"', f'model=~"{settings.step_regex("(preprocess|detector)")}"'
    outputs = _exprs(dashboard, "Empty and capped outputs")
    assert any("ensemble_empty_outputs_total" in e and nms in e and "by (version)" in e for e in outputs)
    assert any("ensemble_capped_outputs_total" in e for e in outputs)
    assert any("histogram_quantile" in e and "ensemble_detections_per_image_bucket" in e
               for e in _exprs(dashboard, "Detections per image"))
    assert any("ensemble_detection_score_bucket" in e for e in _exprs(dashboard, "Detection scores"))
    assert any("ensemble_rejected_images_total" in e and pre in e and "by (reason)" in e
               for e in _exprs(dashboard, "Rejected images"))


def test_every_query_uses_known_triton_metrics_and_the_provisioned_datasource(
    dashboard: dict[str, Any], rendered_dir: Path
) -> None:
    datasource = yaml.safe_load((rendered_dir / "monitoring/grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            assert metric_names(target["expr"]) and metric_names(target["expr"]) <= KNOWN_METRICS
            assert target["datasource"]["uid"] == uid
            assert target["expr"].count("(") == target["expr"].count(")")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_summary_quantiles_are_enabled_on_the_server(compose: dict[str, Any]) -> None:
    """The p50/p95/p99 panels read summary metrics, which Triton only exports with this flag."""
    assert "--metrics-config=summary_latencies=true" in compose["services"]["triton"]["command"]


def test_prometheus_scrapes_triton_and_grafana_mounts_the_provisioning(rendered_dir: Path,
                                                                     compose: dict[str, Any]) -> None:
    prom = yaml.safe_load((rendered_dir / "monitoring/prometheus/prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert "triton:8002" in targets
    grafana = compose["services"]["grafana"]
    sources = {v["source"] for v in grafana["volumes"] if v["type"] == "bind"}
    for source in sources:
        assert (rendered_dir / source).exists(), source
    provider = yaml.safe_load((rendered_dir / "monitoring/grafana/provisioning/dashboards/provider.yml").read_text())
    mounted = {v["target"] for v in grafana["volumes"]}
    assert provider["providers"][0]["options"]["path"] in mounted
    # CPU and GPU Triton both live in the pod's network namespace, which answers to the alias Prometheus
    # scrapes; Triton's metrics port listens on that namespace's interfaces.
    assert "triton" in compose["services"]["pod"]["networks"]["default"]["aliases"]
    for name in ("triton", "triton-cpu"):
        assert compose["services"][name]["network_mode"] == "service:pod"
        assert "--metrics-address=0.0.0.0" in compose["services"][name]["command"]


def test_monitoring_check_flags_unknown_metrics(rendered_dir: Path, tmp_path: Path, settings: Settings) -> None:
    assert monitoring_problems(rendered_dir, settings) == []
    board = build_dashboard(settings)
    board["panels"][0]["targets"][0]["expr"] = "rate(nv_inference_requests_total[1m])"
    copy = tmp_path / "deploy"
    for rel in ("monitoring/prometheus/prometheus.yml", "monitoring/prometheus/alerts.yml",
                "monitoring/grafana/dashboards/triton.json"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_text((rendered_dir / rel).read_text())
    (copy / "monitoring/grafana/dashboards/triton.json").write_text(json.dumps(board))
    assert any("nv_inference_requests_total" in p for p in monitoring_problems(copy, settings))


def test_every_promql_query_parses(dashboard: dict[str, Any], settings: Settings) -> None:
    """Dashboard panels and the autoscaler's adapter query are valid PromQL (Rust promql-parser)."""
    promql = pytest.importorskip("promql_parser")
    from deploy.render.files import adapter_metrics_query

    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    # prometheus-adapter fills these template fields before sending the query.
    adapter = adapter_metrics_query(settings).replace("<<.LabelMatchers>>", 'namespace="ns",pod=~"a|b"')
    exprs.append(adapter.replace("<<.GroupBy>>", "pod"))
    for expr in exprs:
        promql.parse(expr)
    with pytest.raises(ValueError):
        promql.parse(exprs[0].replace(")", "", 1))
