"""The steps' phase timers on the real embedded Triton: every step counts the batches Triton ran and times its
phases inside ``execute``, which fit within Triton's own compute time of the same batches."""

from __future__ import annotations

import pytest

from generator.serving.contract import STEPS, step_model_name
from generator.serving.phases import DETECTOR_PHASES, NMS_PHASES, PREPROCESS_PHASES
from loadtest.metrics import (
    phase_deltas,
    phases_table,
    published_phases,
    settled_deltas,
    snapshot,
    stages_table,
)
from tests.integration.helpers import infer, scene_bytes

pytestmark = pytest.mark.integration

PHASES = {"preprocess": PREPROCESS_PHASES, "detector": DETECTOR_PHASES, "nms": NMS_PHASES}
REQUESTS = 5


def test_every_step_times_its_phases_within_tritons_compute(triton_server) -> None:
    models = {step_model_name(triton_server.model_name, step): step for step in STEPS}
    for seed in range(2):  # a fresh server's first requests touch new shared memory: not what is measured
        infer(triton_server, triton_server.model_name, [scene_bytes(60 + seed, 640, 480)])
    before_phases = published_phases(triton_server.metrics_url, tuple(models))
    before = snapshot(triton_server.metrics_url)
    for seed in range(REQUESTS):  # one at a time: each batch holds one request, so Triton's times are per batch
        infer(triton_server, triton_server.model_name, [scene_bytes(70 + seed, 640, 480)])
    stages = settled_deltas(triton_server.metrics_url, before, tuple(models), REQUESTS)
    phases = phase_deltas(before_phases, published_phases(triton_server.metrics_url, tuple(models)))
    print("\n" + "\n".join([*stages_table(stages), "", *phases_table(stages, phases)]))
    for model, step in models.items():
        record, stage = phases[model], stages[model]
        assert record["batches"] == stage.executions == REQUESTS, (model, record, stage)
        assert set(record["ms_per_batch"]) == set(PHASES[step]), record
        assert all(ms > 0 for ms in record["ms_per_batch"].values()), record
        compute_ms = sum(us or 0.0 for us in (stage.compute_input_us, stage.compute_infer_us,
                                               stage.compute_output_us)) / 1000
        # execute runs inside the stub call Triton times: its phases take part of that time, never more.
        assert sum(record["ms_per_batch"].values()) < compute_ms, (model, record, compute_ms)
