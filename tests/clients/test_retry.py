"""Retry decisions, backoff and deadlines; against a real overloaded server: tests/integration/test_faults.py."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from clients.errors import (
    ClientError,
    ClientTimeoutError,
    InferenceError,
    RestrictedApiError,
    ServerBusyError,
    ServerUnavailableError,
)
from clients.retry import NO_RETRY, RetryPolicy, acall_with_retries, call_with_retries


class Flaky:
    """Fails with the given errors in turn, then answers; records the time limit each attempt got."""

    def __init__(self, *errors: ClientError) -> None:
        self.errors = list(errors)
        self.limits: list[float] = []

    def __call__(self, timeout_s: float) -> str:
        self.limits.append(timeout_s)
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


FAST = RetryPolicy(attempts=4, initial_backoff_s=0.001, max_backoff_s=0.002)


def test_unavailable_is_retried_until_it_succeeds() -> None:
    attempt = Flaky(ServerUnavailableError("Exceeds maximum queue size"), ServerUnavailableError("reset"))
    assert call_with_retries(attempt, FAST, 5.0, "inference") == "ok"
    assert len(attempt.limits) == 3
    assert attempt.limits == sorted(attempt.limits, reverse=True) and attempt.limits[0] <= 5.0


@pytest.mark.parametrize(
    "error",
    [InferenceError("invalid image: truncated JPEG", "400"), RestrictedApiError("restricted"),
     ClientTimeoutError("no answer"), ClientError("odd")],
)
def test_other_errors_are_never_retried(error: ClientError) -> None:
    attempt = Flaky(error)
    with pytest.raises(type(error)) as info:
        call_with_retries(attempt, FAST, 5.0, "inference")
    assert info.value is error and len(attempt.limits) == 1


def test_attempts_are_capped() -> None:
    attempt = Flaky(*(ServerUnavailableError(f"busy {i}") for i in range(10)))
    with pytest.raises(ServerUnavailableError, match="busy 3"):
        call_with_retries(attempt, FAST, 5.0, "inference")
    assert len(attempt.limits) == 4


def test_no_retry_policy_tries_once() -> None:
    attempt = Flaky(ServerUnavailableError("busy"))
    with pytest.raises(ServerUnavailableError):
        call_with_retries(attempt, NO_RETRY, 5.0, "inference")
    assert len(attempt.limits) == 1


def test_the_deadline_bounds_the_retries() -> None:
    """A pause that would end past the deadline is not taken: the last error comes back on time."""
    slow = RetryPolicy(attempts=100, initial_backoff_s=0.2, max_backoff_s=0.2, multiplier=1.0)
    attempt = Flaky(*(ServerUnavailableError("restarting") for _ in range(100)))
    start = time.monotonic()
    with pytest.raises(ServerUnavailableError, match="restarting"):
        call_with_retries(attempt, slow, 0.5, "inference")
    assert time.monotonic() - start < 0.6
    assert all(limit <= 0.5 for limit in attempt.limits)


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(attempts=10, initial_backoff_s=0.1, max_backoff_s=0.5, multiplier=2.0)
    rng = random.Random(7)
    samples = [[policy.backoff_s(retry, rng) for _ in range(2000)] for retry in range(5)]
    for retry, ceiling in enumerate((0.1, 0.2, 0.4, 0.5, 0.5)):
        assert min(samples[retry]) >= 0.0 and max(samples[retry]) <= ceiling
        assert max(samples[retry]) > 0.9 * ceiling and min(samples[retry]) < 0.1 * ceiling  # full jitter


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"initial_backoff_s": -1}, {"initial_backoff_s": 2, "max_backoff_s": 1},
     {"multiplier": 0.5}, {"max_backoff_s": float("inf")}],
)
def test_policy_rejects_nonsense(kwargs: dict) -> None:
    with pytest.raises(ClientError, match="RetryPolicy"):
        RetryPolicy(**kwargs)


def test_async_form_retries_the_same_way() -> None:
    errors = [ServerUnavailableError("busy"), InferenceError("bad image", "400")]

    async def attempt(timeout_s: float) -> str:
        raise errors.pop(0)

    with pytest.raises(InferenceError, match="bad image"):
        asyncio.run(acall_with_retries(attempt, FAST, 5.0, "inference"))
    assert errors == []


def test_a_refusal_naming_retry_after_is_not_retried_sooner() -> None:
    attempt = Flaky(ServerBusyError("busy; retry after 0.2 s", retry_after_s=0.2))
    pauses: list[float] = []
    assert call_with_retries(attempt, FAST, 5.0, "inference", sleep=pauses.append) == "ok"
    assert len(pauses) == 1 and 0.2 <= pauses[0] <= 0.2 + FAST.max_backoff_s


def test_a_retry_after_past_the_deadline_is_raised_at_once() -> None:
    attempt = Flaky(ServerBusyError("busy; retry after 1 s", retry_after_s=1.0))
    start = time.monotonic()
    with pytest.raises(ServerBusyError):
        call_with_retries(attempt, FAST, 0.5, "inference")
    assert time.monotonic() - start < 0.1 and len(attempt.limits) == 1
