"""Prometheus alert rules for the ensemble, built as data from spec lists like the dashboard.

Rendered twice: ``monitoring/prometheus/alerts.yml`` (the compose Prometheus loads it) and
``k8s/prometheusrule.yaml`` (a PrometheusRule for the Prometheus Operator). ``promtool check rules`` validates
the file in CI, and tests/integration/test_alert_rules.py fires them with ``promtool test rules`` on series
scraped from a real embedded server.

GPU rules read the GPU exporter's ``gpu_*`` series (generator/server/gpu_metrics.py: NVML, served beside the
watchdog by ``generator serve`` and by the GPU profile's exporter): NVML reports the throttle reasons, so thermal
and power throttling are alerted on directly. Triton's own ``nv_gpu_*`` need DCGM, which a plain GPU host lacks.
A Jetson (generator/server/jetson_metrics.py: tegrastats) exports the same ``gpu_*`` names for its shared RAM, its
input power against the power mode's budget and its GPU load, so the memory, power and saturation rules hold there
unchanged; tegrastats reports no throttle reason, so its thermal rule reads the zones' temperatures instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deploy.settings import Settings
from generator.serving.contract import EMPTY_OUTPUTS_METRIC, IMAGES_METRIC

GROUP = "triton-ensemble"
WATCHDOG_RESTARTS = "triton_watchdog_restarts_total"
# A container's watchdog exits for its restart; where its counters do not survive that (compose's tmpfs), the
# new process's start time still changes.
WATCHDOG_STARTED = "triton_watchdog_start_time_seconds"
_METRIC_RE = re.compile(r"\b((?:nv|ensemble|triton_watchdog|gpu|jetson)_[a-z_]+)\b")
# "Pinned": the GPU busy this share of NVML's samples over 10 min while the p95 rose by this factor in 30 min.
GPU_PINNED_RATIO = 0.95
P95_RISE = 1.5


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str  # "" fires at once
    severity: str
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, "description": self.description}
        return rule


def metric_names(expr: str) -> set[str]:
    """The Triton, ensemble and watchdog metric names an expression reads."""
    return set(_METRIC_RE.findall(expr))


def with_floor(expr: str, s: Settings, *traffic: str) -> str:
    """``expr`` only while every ``traffic`` (a per-second rate) is at least ``alert_min_per_minute``: a share of
    three requests or the p95 of the watchdog's probes alone says nothing about the service (issue 37)."""
    return f"({expr})" + "".join(f" and on() ({rate} >= {s.alert_min_per_minute / 60:.6g})" for rate in traffic)


def _serving_alerts(s: Settings) -> list[Alert]:
    ens = f'model="{s.model_name}"'
    steps = f'model=~"{s.step_regex()}"'  # every version's steps: a rollout runs two side by side
    failed = f"sum(rate(nv_inference_request_failure{{{ens}}}[5m]))"
    succeeded = f"sum(rate(nv_inference_request_success{{{ens}}}[5m]))"
    return [
        Alert("TritonEnsembleErrorRate",
              with_floor(f"{failed} / ({failed} + {succeeded}) > {s.alert_error_percent / 100:g}",
                         s, f"({failed} + {succeeded})"),
              "5m", "critical", f"More than {s.alert_error_percent}% of {s.model_name} requests fail",
              "Failed share {{ $value | humanizePercentage }} over 5 min: bad images, shed requests "
              "(UNAVAILABLE) and step errors all count; see nv_inference_request_failure by model and reason."),
        Alert("TritonEnsembleLatencyP95OverSla",
              with_floor(f'max(nv_inference_request_summary_us{{{ens},quantile="0.95"}}) / 1000 > '
                         f"{s.latency_sla_p95_ms}", s, succeeded),
              "5m", "warning", f"{s.model_name} p95 latency above the {s.latency_sla_p95_ms} ms SLA",
              "p95 is {{ $value | humanize }} ms (Triton's summary over its sliding window, worst pod)."),
        Alert("TritonEnsembleQueueTime",
              with_floor(f"sum(rate(nv_inference_queue_duration_us{{{steps}}}[5m])) / {succeeded} / 1000 > "
                         f"{s.alert_queue_ms}", s, succeeded),
              "5m", "warning", f"{s.model_name} requests wait more than {s.alert_queue_ms} ms in the step queues",
              "{{ $value | humanize }} ms of queueing per request across the steps: add instances or replicas "
              "before requests are shed."),
    ]


def _quality_alerts(s: Settings) -> list[Alert]:
    nms = f'model=~"{s.step_regex("nms")}"'

    def share(window: str) -> str:  # e.g. "[10m]" or "[1h] offset 10m"
        return f"sum(rate({EMPTY_OUTPUTS_METRIC}{{{nms}}}{window})) / sum(rate({IMAGES_METRIC}{{{nms}}}{window}))"

    def images(window: str) -> str:
        return f"sum(rate({IMAGES_METRIC}{{{nms}}}{window}))"

    jump = s.alert_empty_jump_points / 100
    jumped = f"({share('[10m]')}) - ({share('[1h] offset 10m')}) > {jump:g}"
    return [
        # Both windows need traffic: a share against a quiet hour (a night, a new version) is no baseline.
        Alert("EnsembleEmptyOutputShareJump", with_floor(jumped, s, images("[10m]"), images("[1h] offset 10m")),
              "5m", "warning", f"{s.model_name} answers far more images with no detection than an hour ago",
              f"The share of empty outputs rose by {{{{ $value | humanizePercentage }}}} (threshold "
              f"{s.alert_empty_jump_points} points) against the hour before: a broken model version, a camera "
              "failure or a changed scene. Compare ensemble_empty_outputs_total by version."),
    ]


def _platform_alerts(s: Settings) -> list[Alert]:
    return [
        Alert("TritonStubRestarted",
              f"increase({WATCHDOG_RESTARTS}[15m]) > 0 or changes({WATCHDOG_STARTED}[15m]) > 0", "", "warning",
              "The watchdog restarted Triton",
              "Reason {{ $labels.reason }} (none: the container restarted): a Python-backend stub died, probes failed, or tritonserver exited "
              "(generator/server/watchdog.py). Look at the server log of the restarted container."),
    ]


def _gpu_alerts(s: Settings) -> list[Alert]:
    selector = f'nv_inference_request_summary_us{{model="{s.model_name}",quantile="0.95"}}'
    return [
        Alert("GpuMemoryNearFull",
              f"max by (uuid) (gpu_memory_used_bytes / gpu_memory_total_bytes) > {s.alert_gpu_memory_percent / 100:g}",
              "10m", "warning", f"GPU memory above {s.alert_gpu_memory_percent}%",
              "GPU {{ $labels.uuid }} uses {{ $value | humanizePercentage }} of its memory: a larger batch or "
              "another instance may not fit (gpu_process_memory_bytes says which model holds it)."),
        Alert("GpuThermalThrottling", 'max by (uuid) (gpu_throttled{reason="thermal"}) > 0', "2m", "critical",
              "GPU clocks held down by temperature",
              "NVML reports thermal slowdown on GPU {{ $labels.uuid }}: check cooling and airflow; throughput "
              "and latency suffer until it cools (gpu_temperature_celsius)."),
        Alert("GpuPowerThrottling",
              f'max by (uuid) (gpu_throttled{{reason="power"}}) > 0 or '
              f"max by (uuid) (gpu_power_watts / gpu_power_limit_watts) > {s.alert_power_percent / 100:g}",
              "10m", "warning", "GPU at its power limit: clocks are being throttled",
              "GPU {{ $labels.uuid }} is power-capped (NVML's power cap or brake, or a draw near the limit)."),
        Alert("GpuSaturatedLatencyRising",
              f"(avg_over_time(gpu_utilization_ratio[10m]) > {GPU_PINNED_RATIO:g}) and on() "
              f"(max({selector}) > {P95_RISE:g} * max({selector} offset 30m))",
              "10m", "warning", f"GPU pinned while the {s.model_name} p95 rises: out of GPU capacity",
              "GPU {{ $labels.uuid }} has been busy for 10 min while the p95 grew by half in 30 min: the GPU, "
              "not the queue settings, is the bound. Add a GPU or replica, or lower the precision."),
        Alert("JetsonTemperatureHigh",
              f"max by (zone) (jetson_temperature_celsius) > {s.alert_jetson_temperature_celsius}", "2m", "critical",
              f"Jetson zone above {s.alert_jetson_temperature_celsius} C: near its throttling trip points",
              "Thermal zone {{ $labels.zone }} reads {{ $value }} C: the SoC throttles its clocks near its trip "
              "points. Check the fan and the enclosure, or pick a lower power mode (nvpmodel)."),
    ]


def alert_rules(settings: Settings) -> list[Alert]:
    return _serving_alerts(settings) + _quality_alerts(settings) + _platform_alerts(settings) + _gpu_alerts(settings)


def rule_groups(settings: Settings) -> list[dict[str, Any]]:
    """The ``groups`` of a Prometheus rule file (and of a PrometheusRule's spec)."""
    return [{"name": f"{GROUP}-{settings.model_name}", "rules": [a.rule() for a in alert_rules(settings)]}]
