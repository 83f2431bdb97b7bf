"""Helpers shared by the generated Python-backend models (copied into each model's version folder)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from ensemble_pipeline.contract import METRIC_LABELS, PROBE_PARAMETER
from ensemble_pipeline.telemetry import Counts, Publisher, Series, Tally, family_help


def parameters(args: dict[str, str]) -> dict[str, str]:
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


def stack_inputs(requests: list[Any], name: str) -> tuple[np.ndarray, list[int]]:
    """Concatenate input ``name`` of every request along the batch axis; return it and each request's size."""
    arrays = [pb_utils.get_input_tensor_by_name(r, name).as_numpy() for r in requests]
    sizes = [len(a) for a in arrays]
    return (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)), sizes


def is_probe(request: Any) -> bool:
    """Whether ``request`` is a health probe (``PROBE_PARAMETER``), which the quality metrics leave out."""
    text = request.parameters()
    return PROBE_PARAMETER in text and json.loads(text).get(PROBE_PARAMETER) is True


def counted(requests: list[Any], sizes: list[int]) -> np.ndarray | None:
    """Per image of the batch, whether the quality metrics count it (False: a probe's); None when all count."""
    probes = [is_probe(r) for r in requests]
    if not any(probes):
        return None
    return np.repeat(np.logical_not(probes), sizes)


def split_responses(outputs: dict[str, np.ndarray], sizes: list[int]) -> list[Any]:
    """One response per request, each with its slice of every output."""
    responses = []
    start = 0
    for size in sizes:
        tensors = [pb_utils.Tensor(name, value[start : start + size]) for name, value in outputs.items()]
        responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        start += size
    return responses


def failed(requests: list[Any], step: str, exc: BaseException) -> list[Any]:
    """Log the real cause server-side; tell the client only that the step failed."""
    pb_utils.Logger.log_error(f"{step} failed: {type(exc).__name__}: {exc}")
    error = pb_utils.TritonError(f"{step} failed; see the server log")
    return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]


class StepMetrics:
    """This step's quality metrics on Triton's metrics endpoint: one counter per series, labelled with the
    composing model's name and version (the version the ensemble pinned), published once a second.

    ``add`` only sums into a tally; the publisher thread makes the increments (see ensemble_pipeline.telemetry).
    Instances of one model share the counters: Triton keeps one metric per family and label set.
    """

    def __init__(self, args: dict[str, str], series: list[Series], interval_s: float = 1.0) -> None:
        model, version = args["model_name"], args["model_version"]
        labels = dict(zip(METRIC_LABELS, (model, version), strict=True))
        self._families: dict[str, Any] = {}
        self._metrics: dict[Series, Any] = {}
        for name, extra in series:
            if name not in self._families:
                self._families[name] = pb_utils.MetricFamily(
                    name=name, description=family_help(name), kind=pb_utils.MetricFamily.COUNTER)
            self._metrics[(name, extra)] = self._families[name].Metric(labels={**labels, **dict(extra)})
        self._tally = Tally()
        self._publisher = Publisher(self._tally, self._increment, interval_s=interval_s,
                                    on_error=lambda exc: pb_utils.Logger.log_warn(
                                        f"{model}: publishing telemetry failed, will retry: {exc}")).start()

    def add(self, counts: Counts) -> None:
        self._tally.add(counts)

    def _increment(self, series: Series, amount: float) -> None:
        self._metrics[series].increment(amount)

    def close(self) -> None:
        """Stop the publisher and publish what is left (the model's finalize)."""
        self._publisher.close()
