"""The queue policy sized from the latency budget: the numbers every composing step's batcher gets."""

from __future__ import annotations

import pytest

from generator.builder.stages.admission import (
    CONTENTION_FACTOR,
    MIN_BUDGET_MS,
    budget_warning,
    in_flight_limit,
    latency_budget,
    queue_policy,
    queue_size,
)


@pytest.mark.parametrize(("budget_ms", "batch", "batch_ms", "expected"), [
    (250, 8, 50, 12),  # 250 ms serve 5 batches of 8 = 40 images, halved for contention, less the batch running
    (400, 8, 65, 16),  # floor, never more than the pipeline serves in the budget
    (1000, 1, 10, 49),
    (100, 8, 400, 8),  # slower than the budget: still one full batch, or nothing could be batched
    (250, 8, None, 16),  # nothing measured: two batches
])
def test_queue_holds_what_the_pipeline_serves_in_the_budget(budget_ms: float, batch: int,
                                                            batch_ms: float | None, expected: int) -> None:
    assert queue_size(budget_ms, batch, batch_ms) == expected


def test_queue_drains_within_the_budget_at_the_contended_rate() -> None:
    for budget_ms in (50.0, 250.0, 1000.0):
        for batch_ms in (5.0, 33.0, 120.0):
            size = queue_size(budget_ms, 8, batch_ms)
            drain_ms = (size / 8 + 1) * batch_ms * CONTENTION_FACTOR  # the queue and the batch running
            assert drain_ms <= budget_ms or size == 8


def test_policy_rejects_after_the_budget_and_keeps_two_priority_levels() -> None:
    policy = queue_policy(250.0, 8, 50.0)
    assert policy.timeout_us == 250_000
    assert (policy.priority_levels, policy.default_priority_level) == (2, 2)
    assert policy.probe_priority_level == 1
    assert policy.to_json() == {"default_timeout_microseconds": 250_000, "max_queue_size": 12,
                                "priority_levels": 2, "default_priority_level": 2, "probe_priority_level": 1}
    assert queue_policy(0.4, 8, None).timeout_us == 400  # sub-millisecond budgets round to microseconds


def test_a_budget_shorter_than_one_batch_is_reported() -> None:
    assert budget_warning(250.0, 100.0) is None
    warning = budget_warning(250.0, 200.0)
    assert warning is not None
    assert "--max-queue-ms 250 is shorter than one full batch under load (about 400 ms)" in warning
    assert "raise --max-queue-ms or lower --max-batch" in warning


@pytest.mark.parametrize(("batch_ms", "expected"), [
    (497.0, 2982.0),  # yolov8n at 640 on 2 cores: the batch running and two queued, batches of 8, under load
    (40.0, MIN_BUDGET_MS),  # a fast pipeline keeps the floor
    (41.7, 251.0),  # rounded up to a whole millisecond
    (None, MIN_BUDGET_MS),  # nothing measured or given
])
def test_the_default_budget_is_the_running_batch_and_two_queued_under_load(batch_ms: float | None, expected: float) -> None:
    budget = latency_budget(None, batch_ms)
    assert (budget.ms, budget.source) == (expected, "derived")


@pytest.mark.parametrize("batch_ms", [1.0, 62.6, 124.0, 497.0, 5000.0])
def test_a_derived_budget_never_warns_and_queues_two_batches(batch_ms: float) -> None:
    budget = latency_budget(None, batch_ms)
    assert budget_warning(budget.ms, batch_ms) is None
    assert queue_size(budget.ms, 8, batch_ms) >= 16
    assert f"{batch_ms:.1f} ms service time" in budget.basis or budget.ms == MIN_BUDGET_MS


def test_an_explicit_budget_is_the_users_sla_even_when_it_warns() -> None:
    budget = latency_budget(250.0, 497.0)
    assert budget.to_json() == {"max_queue_ms": 250.0, "budget": "explicit",
                                "basis": "--max-queue-ms (the user's SLA)"}
    assert queue_policy(budget.ms, 8, 497.0).timeout_us == 250_000
    assert budget_warning(budget.ms, 497.0) is not None


@pytest.mark.parametrize("batch_ms", [1.0, 62.6, 201.1, 497.0])
def test_the_pipeline_holds_what_it_finishes_within_the_budget(batch_ms: float) -> None:
    """Little's law at the contended rate: the last request admitted is answered within the budget."""
    budget = latency_budget(None, batch_ms)
    limit = in_flight_limit(budget.ms, 8, batch_ms)
    assert limit >= 8
    assert (limit / 8 + 1) * CONTENTION_FACTOR * batch_ms <= budget.ms or limit == 8


def test_the_limit_is_recorded_with_the_admission_and_read_back() -> None:
    from generator.builder.spec.options import BuildOptions
    from generator.builder.stages.admission import build_admission
    from generator.repository.admission_record import Admission

    admission = build_admission(BuildOptions(max_queue_ms=1000, service_ms=100), None)
    assert admission.max_in_flight == in_flight_limit(1000, 8, 100) == 32
    assert Admission.from_json(admission.to_json()) == admission
    older = {k: v for k, v in admission.to_json().items() if k != "max_in_flight"}  # a manifest from before it
    assert Admission.from_json(older).max_in_flight is None
