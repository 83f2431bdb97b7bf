"""Grafana dashboard for the ensemble, built as data so panels follow the model names in Settings.

Latency quantiles come from Triton's summary metrics (``--metrics-config summary_latencies=true``):
Triton 2.51+ computes p50/p90/p95/p99/p99.9 per model over a sliding window. Summaries cannot be
averaged across pods, so multi-replica panels show the worst pod (``max``); the counter-based mean
is exact across pods.
"""

from __future__ import annotations

import re
from typing import Any

from deploy.settings import Settings

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}

# Metric names Triton exports that the dashboard and the autoscaler may use (Triton metrics docs).
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_pending_request_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_memory_total_bytes",
    }
)

_METRIC_RE = re.compile(r"\b(nv_[a-z_]+)\b")


def metric_names(expr: str) -> set[str]:
    """Triton metric names referenced by a PromQL expression."""
    return set(_METRIC_RE.findall(expr))


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(
    pid: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int, description: str
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
    }


Spec = tuple[str, str, list[tuple[str, str]], str]  # title, unit, (PromQL, legend) targets, description
_WINDOW = "[1m]"


def _ensemble_specs(ens: str) -> list[Spec]:
    """Traffic and end-to-end latency of the ensemble."""
    win = _WINDOW
    quantiles = [("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99")]
    return [
        (
            "Ensemble request rate",
            "reqps",
            [
                (f"sum(rate(nv_inference_request_success{{{ens}}}{win}))", "success"),
                (f"sum(rate(nv_inference_request_failure{{{ens}}}{win}))", "failure"),
                (f"sum(rate(nv_inference_count{{{ens}}}{win}))", "images/s"),
            ],
            "Requests per second through the ensemble; images/s counts batch items.",
        ),
        (
            "Ensemble latency p50 / p95 / p99",
            "ms",
            [
                (f'max(nv_inference_request_summary_us{{{ens},quantile="{q}"}}) / 1000', label)
                for q, label in quantiles
            ]
            + [
                (
                    f"sum(rate(nv_inference_request_duration_us{{{ens}}}{win})) / "
                    f"sum(rate(nv_inference_request_success{{{ens}}}{win})) / 1000",
                    "mean",
                ),
            ],
            "End-to-end server latency (summary quantiles over Triton's sliding window; worst pod).",
        ),
    ]


def _step_specs(comp: str) -> list[Spec]:
    """Where the time goes: queue, compute and batching per composing model."""
    win = _WINDOW
    return [
        (
            "Queue time per composing model (mean)",
            "ms",
            [
                (
                    f"sum by (model) (rate(nv_inference_queue_duration_us{{{comp}}}{win})) / "
                    f"sum by (model) (rate(nv_inference_request_success{{{comp}}}{win})) / 1000",
                    "{{model}}",
                ),
            ],
            "Time requests wait for a model instance; rising queue time means add replicas or instances.",
        ),
        (
            "Queue time per composing model p99",
            "ms",
            [
                (
                    f'max by (model) (nv_inference_queue_summary_us{{{comp},quantile="0.99"}}) / 1000',
                    "{{model}}",
                ),
            ],
            "p99 of the scheduling queue per step (worst pod).",
        ),
        (
            "Compute time per composing model (mean)",
            "ms",
            [
                (
                    f"sum by (model) (rate(nv_inference_compute_infer_duration_us{{{comp}}}{win})) / "
                    f"sum by (model) (rate(nv_inference_exec_count{{{comp}}}{win})) / 1000",
                    "{{model}}",
                ),
            ],
            "Time per batch execution in each step.",
        ),
        (
            "Dynamic batch size per composing model",
            "short",
            [
                (
                    f"sum by (model) (rate(nv_inference_count{{{comp}}}{win})) / "
                    f"sum by (model) (rate(nv_inference_exec_count{{{comp}}}{win}))",
                    "{{model}}",
                ),
            ],
            "Inferences per execution: 1.0 means the dynamic batcher is not batching.",
        ),
    ]


def _health_specs(every: str) -> list[Spec]:
    """Failures and the GPUs."""
    win = _WINDOW
    return [
        (
            "Failures per model",
            "reqps",
            [
                (f"sum by (model) (rate(nv_inference_request_failure{{{every}}}{win}))", "{{model}}"),
                (f"sum by (model) (nv_inference_pending_request_count{{{every}}})", "pending {{model}}"),
            ],
            "Failed requests per second (bad images, queue rejections) and requests still pending.",
        ),
        (
            "GPU utilisation",
            "percentunit",
            [
                ("avg by (gpu_uuid) (nv_gpu_utilization)", "{{gpu_uuid}}"),
            ],
            "DCGM utilisation (0-1) per GPU.",
        ),
        (
            "GPU memory",
            "bytes",
            [
                ("sum by (gpu_uuid) (nv_gpu_memory_used_bytes)", "used {{gpu_uuid}}"),
                ("sum by (gpu_uuid) (nv_gpu_memory_total_bytes)", "total {{gpu_uuid}}"),
            ],
            "Used and total device memory per GPU.",
        ),
    ]


def build_dashboard(settings: Settings) -> dict[str, Any]:
    """The dashboard JSON model (Grafana schema 39) for ``settings.model_name``."""
    specs = (
        _ensemble_specs(f'model="{settings.model_name}"')
        + _step_specs('model=~"{}"'.format("|".join(settings.composing_models)))
        + _health_specs('model=~"{}"'.format("|".join(settings.all_models)))
    )
    panels = [
        _panel(i + 1, title, unit, targets, x=(i % 2) * 12, y=(i // 2) * 8, description=desc)
        for i, (title, unit, targets, desc) in enumerate(specs)
    ]
    return {
        "uid": f"triton-{settings.model_name}",
        "title": f"Triton ensemble {settings.model_name}",
        "tags": ["triton", "yolo"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "panels": panels,
    }
