"""Triton's Prometheus metrics: scrape, parse, and turn two snapshots into per-model stage costs.

Triton's counters are cumulative since start-up, so a run's numbers are the difference between a scrape
before and one after. Durations are microseconds summed over successful requests; dividing by the
request delta gives the average cost per request of each stage (queue, compute input/infer/output).
"""

from __future__ import annotations

import math
import re
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from .errors import MetricsError

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

# Per-model counters (summed over versions and failure reasons) that the stage report needs.
COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_prometheus(text: str) -> list[Sample]:
    """Parse Prometheus text exposition format; comment and blank lines are skipped, bad lines rejected."""
    samples: list[Sample] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise MetricsError(f"line {number} of the metrics text is not a Prometheus sample: {line[:120]!r}")
        labels = {k: _unescape(v) for k, v in _LABEL.findall(match.group("labels") or "")}
        try:
            value = float(match.group("value"))
        except ValueError as exc:
            raise MetricsError(f"line {number}: value {match.group('value')!r} is not a number") from exc
        samples.append(Sample(match.group("name"), labels, value))
    return samples


Snapshot = dict[str, dict[str, float]]  # model -> counter name -> value


def model_counters(samples: list[Sample]) -> Snapshot:
    """Sum the per-model counters over versions and failure reasons."""
    snapshot: Snapshot = {}
    for sample in samples:
        model = sample.labels.get("model")
        if model is None or math.isnan(sample.value):
            continue
        if sample.name not in COUNTERS:
            continue
        counters = snapshot.setdefault(model, dict.fromkeys(COUNTERS, 0.0))
        counters[sample.name] += sample.value
    return snapshot


def scrape(metrics_url: str, timeout_s: float = 5.0) -> str:
    """GET the metrics text; ``metrics_url`` is ``host:port`` or a full URL."""
    url = metrics_url if "://" in metrics_url else f"http://{metrics_url}"
    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return str(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError) as exc:
        raise MetricsError(f"could not scrape Triton metrics at {url}: {exc} (is --metrics-url right?)") from exc


def snapshot(metrics_url: str) -> Snapshot:
    return model_counters(parse_prometheus(scrape(metrics_url)))


@dataclass(frozen=True)
class StageStats:
    """What one model did between two snapshots; times are average microseconds per successful request."""

    requests: int
    failures: int
    inferences: int
    executions: int
    avg_batch: float | None
    request_us: float | None
    queue_us: float | None
    compute_input_us: float | None
    compute_infer_us: float | None
    compute_output_us: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _per(total: float, count: float) -> float | None:
    return round(total / count, 1) if count > 0 else None


def settled_deltas(metrics_url: str, before: Snapshot, models: tuple[str, ...], answered: int,
                   timeout_s: float = 5.0, poll_s: float = 0.1) -> dict[str, StageStats]:
    """The deltas once Triton has counted, in each of ``models``, every request the client saw succeed since
    ``before``: a composing model's statistics are recorded when its request is released, which can come after the
    ensemble's response reached the client (CI read 24 of 25 at once). Gives up waiting after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        stages = stage_deltas(before, snapshot(metrics_url))
        counted = [stages[m].requests for m in models if m in stages]  # a model never loaded is not waited for
        if min(counted, default=answered) >= answered or time.monotonic() >= deadline:
            return stages
        time.sleep(poll_s)


def stage_deltas(before: Snapshot, after: Snapshot) -> dict[str, StageStats]:
    """Per-model deltas between two snapshots (models that did nothing are included with zeros)."""
    result: dict[str, StageStats] = {}
    for model, end in sorted(after.items()):
        start = before.get(model, dict.fromkeys(COUNTERS, 0.0))
        d = {name: end[name] - start.get(name, 0.0) for name in COUNTERS}
        ok = d["nv_inference_request_success"]
        result[model] = StageStats(
            requests=int(ok),
            failures=int(d["nv_inference_request_failure"]),
            inferences=int(d["nv_inference_count"]),
            executions=int(d["nv_inference_exec_count"]),
            avg_batch=round(d["nv_inference_count"] / d["nv_inference_exec_count"], 2)
            if d["nv_inference_exec_count"] > 0
            else None,
            request_us=_per(d["nv_inference_request_duration_us"], ok),
            queue_us=_per(d["nv_inference_queue_duration_us"], ok),
            compute_input_us=_per(d["nv_inference_compute_input_duration_us"], ok),
            compute_infer_us=_per(d["nv_inference_compute_infer_duration_us"], ok),
            compute_output_us=_per(d["nv_inference_compute_output_duration_us"], ok),
        )
    return result


def stages_table(stages: dict[str, StageStats]) -> list[str]:
    """Markdown rows (with header) of the per-model costs, for terminals and reports."""
    lines = [
        "| model | requests | failures | avg batch | request us | queue us | input us | infer us | output us |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.2f}"

    for model, s in stages.items():
        lines.append(
            f"| {model} | {s.requests} | {s.failures} | {fmt(s.avg_batch)} | {fmt(s.request_us)} | {fmt(s.queue_us)} "
            f"| {fmt(s.compute_input_us)} | {fmt(s.compute_infer_us)} | {fmt(s.compute_output_us)} |"
        )
    return lines


# The steps' own phase counters (generator/serving/phases.py): model -> phase -> seconds, BATCHES -> batches.
PhaseSnapshot = dict[str, dict[str, float]]
BATCHES = "batches"


def phase_counters(samples: list[Sample]) -> PhaseSnapshot:
    """Every step's phase seconds and batch count, summed over versions."""
    from generator.serving.contract import BATCHES_METRIC, PHASE_SECONDS_METRIC

    totals: PhaseSnapshot = {}
    for sample in samples:
        model = sample.labels.get("model")
        if model is None or math.isnan(sample.value):
            continue
        if sample.name == PHASE_SECONDS_METRIC and "phase" in sample.labels:
            key = sample.labels["phase"]
        elif sample.name == BATCHES_METRIC:
            key = BATCHES
        else:
            continue
        phases = totals.setdefault(model, {})
        phases[key] = phases.get(key, 0.0) + sample.value
    return totals


def _phase_order(phase: str) -> tuple[int, str]:
    """Phases in the order a batch goes through them (the steps' own lists), unknown ones last."""
    from generator.serving.phases import ALL_PHASES

    return (ALL_PHASES.index(phase) if phase in ALL_PHASES else len(ALL_PHASES), phase)


def phase_deltas(before: PhaseSnapshot, after: PhaseSnapshot) -> dict[str, dict[str, Any]]:
    """Per step that ran batches in between: the batches and the milliseconds per batch of each phase."""
    result: dict[str, dict[str, Any]] = {}
    for model, end in sorted(after.items()):
        start = before.get(model, {})
        batches = end.get(BATCHES, 0.0) - start.get(BATCHES, 0.0)
        if batches <= 0:
            continue
        per_batch = {phase: round((end[phase] - start.get(phase, 0.0)) * 1000 / batches, 3)
                     for phase in sorted((p for p in end if p != BATCHES), key=_phase_order)}
        result[model] = {"batches": int(batches), "ms_per_batch": per_batch}
    return result


def published_phases(metrics_url: str, models: tuple[str, ...], timeout_s: float = 3.0,
                     poll_s: float = 0.1) -> PhaseSnapshot:
    """The phase counters once every step of ``models`` that has them has published as many batches as Triton has
    counted executions (the steps publish once a second, after Triton counts), or as they stand after
    ``timeout_s``. Taken before and after a window, the two bound the same batches as Triton's counters."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = parse_prometheus(scrape(metrics_url))
        executions, phases = model_counters(samples), phase_counters(samples)
        behind = [m for m in models if m in phases
                  and phases[m].get(BATCHES, 0.0) < executions.get(m, {}).get("nv_inference_exec_count", 0.0)]
        if not behind or time.monotonic() >= deadline:
            return phases
        time.sleep(poll_s)


def _compute_ms(stage: StageStats | None) -> float | None:
    """Triton's compute (input, infer, output) of a request, in ms: its batch's, so per batch when batches hold one
    request each (one stream), and weighted by the requests of each batch otherwise."""
    if stage is None:
        return None
    parts = (stage.compute_input_us, stage.compute_infer_us, stage.compute_output_us)
    return sum(p for p in parts if p is not None) / 1000 if all(p is not None for p in parts) else None


def phases_table(stages: dict[str, StageStats], phases: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown rows: each step's phases inside ``execute`` (ms per batch) beside Triton's compute of the same
    batches, and what lies around ``execute`` (Triton's compute less the phases: the stub's messaging)."""
    lines = ["| step | batches | Triton compute ms/batch | phases inside execute, ms/batch | around execute ms |",
             "|---|---:|---:|---|---:|"]
    for model, record in phases.items():
        compute = _compute_ms(stages.get(model))
        inside = sum(record["ms_per_batch"].values())
        listed = ", ".join(f"{phase} {ms:.2f}" for phase, ms in record["ms_per_batch"].items())
        around = f"{compute - inside:.2f}" if compute is not None else "-"
        lines.append(f"| {model} | {record['batches']} | {f'{compute:.2f}' if compute is not None else '-'} | "
                     f"{listed} | {around} |")
    return lines
