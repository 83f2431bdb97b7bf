"""What one side of a rollout (stable or canary) did in a traffic window, from two scrapes of Triton's metrics.

Triton's request counters and the Python steps' quality counters (generator/serving/telemetry.py) are cumulative,
so a window is the difference of a scrape at its start and one at its end, per model. The stable side is the
alias ensemble plus the stable version's own ensemble (``NAME`` and ``NAME_vS``), the canary side ``NAME_vC``;
the quality counters come from each side's NMS and preprocess steps. Latency is Triton's p95 summary
(``--metrics-config summary_latencies=true``) of the side's ensembles at the end of the window: Triton computes
it over its own sliding window (the last ``SUMMARY_MAX_AGE_S``), so it is read, not differenced. The canary's summary
covers only its own life (its load, warm-up and the window); with a window shorter than the summary's age the
stable side's also covers the calmer or busier time before it, so the two p95s are of different periods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from generator.serving.contract import (
    CAPPED_OUTPUTS_METRIC,
    DETECTIONS_METRIC,
    EMPTY_OUTPUTS_METRIC,
    IMAGES_METRIC,
    REJECTED_METRIC,
    SCORE_METRIC,
)

SUCCESS = "nv_inference_request_success"
FAILURE = "nv_inference_request_failure"
LATENCY_SUMMARY = "nv_inference_request_summary_us"
# How far back Triton's latency summaries reach: prometheus-cpp's Summary default (max_age 60 s in 5 buckets), which
# Triton's metric_model_reporter.cc keeps. A shorter window reads the stable side's p95 over traffic from before it.
SUMMARY_MAX_AGE_S = 60.0

# (metric name, sorted labels) -> value
Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _key(name: str) -> str:
    """A sample name without ``_total``: the parser adds it to every counter sample (OpenMetrics' rule), Triton's
    own counters lack it and the steps' have it."""
    return name.removesuffix("_total")


def parse_scrape(text: str) -> Scrape:
    """Every sample of a Prometheus text exposition, keyed by name (less ``_total``) and labels."""
    samples: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(_key(sample.name), tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def _total(scrape: Scrape, name: str, models: Iterable[str], **labels: str) -> float:
    wanted, name = set(models), _key(name)
    total = 0.0
    for (sample, sample_labels), value in scrape.items():
        found = dict(sample_labels)
        if sample == name and found.get("model") in wanted and all(found.get(k) == v for k, v in labels.items()):
            total += value
    return total


def _buckets(scrape: Scrape, name: str, models: Iterable[str]) -> dict[str, float]:
    """A histogram's cumulative buckets (``le`` -> count), summed over ``models``."""
    wanted = set(models)
    out: dict[str, float] = {}
    for (sample, sample_labels), value in scrape.items():
        found = dict(sample_labels)
        if sample == f"{name}_bucket" and found.get("model") in wanted:
            out[found["le"]] = out.get(found["le"], 0.0) + value
    return out


@dataclass(frozen=True)
class SideModels:
    """The models of one side: the ensembles its traffic enters and its NMS and preprocess steps."""

    ensembles: tuple[str, ...]
    nms: str
    preprocess: str


@dataclass(frozen=True)
class SideWindow:
    """One side's traffic in the window."""

    requests: float
    failures: float
    images: float
    empty: float
    capped: float
    rejected: float
    p95_ms: float | None
    detections_buckets: Mapping[str, float] = field(default_factory=dict)
    score_buckets: Mapping[str, float] = field(default_factory=dict)
    detections_sum: float = 0.0
    detections_count: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def share(self, count: float) -> float:
        return count / self.images if self.images else 0.0

    @property
    def mean_detections(self) -> float:
        return self.detections_sum / self.detections_count if self.detections_count else 0.0

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data.update(error_rate=self.error_rate, empty_share=self.share(self.empty),
                    capped_share=self.share(self.capped), mean_detections=self.mean_detections)
        return data


def side_window(before: Scrape, after: Scrape, models: SideModels) -> SideWindow:
    """The difference of two scrapes for one side (counters cannot go down; a restart would show as negative)."""
    def delta(name: str, which: Iterable[str], **labels: str) -> float:
        which = tuple(which)
        return max(_total(after, name, which, **labels) - _total(before, name, which, **labels), 0.0)

    def bucket_delta(name: str) -> dict[str, float]:
        start, end = _buckets(before, name, [models.nms]), _buckets(after, name, [models.nms])
        return {le: max(end[le] - start.get(le, 0.0), 0.0) for le in end}

    nms = [models.nms]
    return SideWindow(
        requests=delta(SUCCESS, models.ensembles) + delta(FAILURE, models.ensembles),
        failures=delta(FAILURE, models.ensembles),
        images=delta(IMAGES_METRIC, nms),
        empty=delta(EMPTY_OUTPUTS_METRIC, nms),
        capped=delta(CAPPED_OUTPUTS_METRIC, nms),
        rejected=delta(REJECTED_METRIC, [models.preprocess]),
        p95_ms=p95_ms(after, models.ensembles),
        detections_buckets=bucket_delta(DETECTIONS_METRIC),
        score_buckets=bucket_delta(SCORE_METRIC),
        detections_sum=delta(f"{DETECTIONS_METRIC}_sum", nms),
        detections_count=delta(f"{DETECTIONS_METRIC}_count", nms),
    )


def p95_ms(scrape: Scrape, ensembles: Iterable[str]) -> float | None:
    """The largest p95 among the side's ensembles (NaN: no request in Triton's window; an ensemble may show
    under more than one version label)."""
    wanted = set(ensembles)
    values = [value / 1000.0 for (name, labels), value in scrape.items()
              if name == LATENCY_SUMMARY and dict(labels).get("model") in wanted
              and dict(labels).get("quantile") == "0.95" and value == value and value > 0]  # NaN != NaN
    return max(values) if values else None
