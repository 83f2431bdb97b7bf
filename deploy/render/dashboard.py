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
from generator.serving.contract import (
    CAPPED_OUTPUTS_METRIC,
    DETECTIONS_METRIC,
    EMPTY_OUTPUTS_METRIC,
    IMAGES_METRIC,
    REJECTED_METRIC,
    SCORE_METRIC,
)

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
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
    }
)
# The GPU exporter's series (generator/server/gpu_metrics.py: NVML, beside the watchdog or alone); Triton's own
# nv_gpu_* need DCGM, which a plain GPU host lacks.
GPU_METRICS = frozenset(
    {
        "gpu_info", "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_memory_total_bytes",
        "gpu_memory_peak_bytes", "gpu_power_watts", "gpu_power_limit_watts", "gpu_energy_joules_total",
        "gpu_temperature_celsius", "gpu_sm_clock_hertz", "gpu_throttled", "gpu_process_memory_bytes",
    }
)
# What the preprocess and NMS steps export (generator/serving/contract.py) and the watchdog's own endpoint.
QUALITY_METRICS = frozenset(
    {
        IMAGES_METRIC, EMPTY_OUTPUTS_METRIC, CAPPED_OUTPUTS_METRIC, REJECTED_METRIC,
        *(f"{name}_{part}" for name in (DETECTIONS_METRIC, SCORE_METRIC) for part in ("bucket", "sum", "count")),
    }
)
WATCHDOG_METRICS = frozenset(
    {
        "triton_watchdog_restarts_total", "triton_watchdog_failed_probes_total",
        "triton_watchdog_server_starts_total", "triton_watchdog_healthy", "triton_watchdog_start_time_seconds",
    }
)
# A Jetson's own series beside the gpu_* names it shares with NVML's exporter (generator/server/jetson_metrics.py).
JETSON_METRICS = frozenset(
    {
        "jetson_cpu_utilization_ratio", "jetson_swap_used_bytes", "jetson_emc_utilization_ratio",
        "jetson_temperature_celsius", "jetson_rail_power_watts", "jetson_power_mode",
    }
)
KNOWN_METRICS = TRITON_METRICS | QUALITY_METRICS | WATCHDOG_METRICS | GPU_METRICS | JETSON_METRICS

_METRIC_RE = re.compile(r"\b((?:nv|ensemble|triton_watchdog|gpu|jetson)_[a-z_]+)\b")


def metric_names(expr: str) -> set[str]:
    """Triton, ensemble and watchdog metric names referenced by a PromQL expression."""
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
                ("max by (uuid) (gpu_utilization_ratio)", "{{uuid}}"),
                ("max by (uuid, reason) (gpu_throttled)", "throttled: {{reason}} {{uuid}}"),
            ],
            "NVML utilisation (0-1) per GPU, and 1 while its clocks are held down (thermal, power).",
        ),
        (
            "GPU memory",
            "bytes",
            [
                ("max by (uuid) (gpu_memory_used_bytes)", "used {{uuid}}"),
                ("max by (uuid) (gpu_memory_peak_bytes)", "peak {{uuid}}"),
                ("max by (uuid) (gpu_memory_total_bytes)", "total {{uuid}}"),
                ("sum by (model) (gpu_process_memory_bytes)", "{{model}}"),
            ],
            "Used, peak and total device memory per GPU, and what each model's processes hold.",
        ),
        (
            "GPU power and temperature",
            "watt",
            [
                ("max by (uuid) (gpu_power_watts)", "draw {{uuid}}"),
                ("max by (uuid) (gpu_power_limit_watts)", "limit {{uuid}}"),
                ("max by (uuid) (gpu_temperature_celsius)", "°C {{uuid}}"),
                ("sum(rate(gpu_energy_joules_total[5m])) / sum(rate(nv_inference_count{model=~\".*_detector\"}[5m]))",
                 "joules per image"),
            ],
            "Power draw against the limit, temperature, and energy per detected image over 5 min.",
        ),
        (
            "Jetson thermal zones, rails and CPU",
            "short",
            [
                ("max by (zone) (jetson_temperature_celsius)", "°C {{zone}}"),
                ("max by (rail) (jetson_rail_power_watts)", "W {{rail}}"),
                ("avg(jetson_cpu_utilization_ratio) * 100", "CPU % (mean of online cores)"),
                ("max by (mode) (jetson_power_mode)", "power mode {{mode}}"),
            ],
            "A Jetson's own counters (tegrastats, nvpmodel): every thermal zone, every power rail, the CPU and the "
            "power mode in force. Empty off a Jetson; its GPU, RAM and input power are in the GPU panels.",
        ),
        (
            "Watchdog restarts",
            "short",
            [
                ("sum by (reason) (increase(triton_watchdog_restarts_total[15m]))", "{{reason}}"),
                ("sum(changes(triton_watchdog_start_time_seconds[15m]))", "container restarts"),
            ],
            "Servers the watchdog stopped as unhealthy in the last 15 min, by reason (dead stub, failed probes...).",
        ),
    ]


def _quality_specs(s: Settings) -> list[Spec]:
    """What the model answers: empty and capped outputs, detections per image, scores, rejected images."""
    # The image counters come from the step that decodes: the preprocess, or the detector of a fused build
    # (--fuse-preprocess); a separate detector step publishes none.
    nms, pre = f'model=~"{s.step_regex("nms")}"', f'model=~"{s.step_regex("(preprocess|detector)")}"'
    win = "[5m]"

    def share(metric: str, model: str) -> str:
        return (f"sum by (version) (rate({metric}{{{model}}}{win})) / "
                f"sum by (version) (rate({IMAGES_METRIC}{{{model}}}{win}))")

    def quantile(metric: str, q: str) -> str:
        return f"histogram_quantile({q}, sum by (version, le) (rate({metric}_bucket{{{nms}}}{win})))"

    return [
        (
            "Empty and capped outputs",
            "percentunit",
            [
                (share(EMPTY_OUTPUTS_METRIC, nms), "empty v{{version}}"),
                (share(CAPPED_OUTPUTS_METRIC, nms), "capped at max detections v{{version}}"),
            ],
            "Share of images answered with no detection, and with as many as --max-detections (more were cut), "
            "per model version.",
        ),
        (
            "Detections per image",
            "short",
            [
                (f"sum by (version) (rate({DETECTIONS_METRIC}_sum{{{nms}}}{win})) / "
                 f"sum by (version) (rate({DETECTIONS_METRIC}_count{{{nms}}}{win}))", "mean v{{version}}"),
                (quantile(DETECTIONS_METRIC, "0.5"), "p50 v{{version}}"),
                (quantile(DETECTIONS_METRIC, "0.95"), "p95 v{{version}}"),
            ],
            "Detections returned per image (histogram buckets 0, 1, 2, 5 ... 1000).",
        ),
        (
            "Detection scores",
            "short",
            [
                (quantile(SCORE_METRIC, "0.1"), "p10 v{{version}}"),
                (quantile(SCORE_METRIC, "0.5"), "p50 v{{version}}"),
                (f"sum by (version) (rate({SCORE_METRIC}_sum{{{nms}}}{win})) / "
                 f"sum by (version) (rate({SCORE_METRIC}_count{{{nms}}}{win}))", "mean v{{version}}"),
            ],
            "Scores of the returned detections: a falling median says the model is less sure of what it sees.",
        ),
        (
            "Rejected images by reason",
            "percentunit",
            [
                (f"sum by (reason) (rate({REJECTED_METRIC}{{{pre}}}{win})) / "
                 f"scalar(sum(rate({IMAGES_METRIC}{{{pre}}}{win})))", "{{reason}}"),
            ],
            "Share of the images the preprocess step refused: empty, format, truncated, too large, decode budget.",
        ),
    ]


def build_dashboard(settings: Settings) -> dict[str, Any]:
    """The dashboard JSON model (Grafana schema 39) for ``settings.model_name``."""
    specs = (
        _ensemble_specs(f'model="{settings.model_name}"')
        + _step_specs(f'model=~"{settings.step_regex()}"')
        + _quality_specs(settings)
        + _health_specs(f'model=~"{settings.models_regex}"')
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
