"""Retries with capped exponential backoff and full jitter, inside one deadline per call.

Only `ServerUnavailableError` is retried: Triton shedding load (UNAVAILABLE / 503 "Exceeds maximum queue
size"), the proxy's in-flight limit (429 / RESOURCE_EXHAUSTED), a server that is draining or restarting, a
connection refused or reset. A refusal that names a ``Retry-After`` (`ServerBusyError.retry_after_s`) is not
retried sooner; one whose wait would pass the call's deadline is raised at once. A bad image, an unknown
model, a restricted API or a timeout fail the same way again, so they are raised at once. Detection only
reads, so sending a request again is safe. Full jitter (a pause drawn from [0, backoff]) keeps clients that
were rejected together from coming back together.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from clients.errors import ClientError, ClientTimeoutError, ServerBusyError, ServerUnavailableError

logger = logging.getLogger(__name__)
T = TypeVar("T")
_RANDOM = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one call is retried; the call's deadline (`timeout_s`) bounds it all."""

    attempts: int = 4  # tries in all; 1 disables retries
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ClientError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if not (0 <= self.initial_backoff_s <= self.max_backoff_s and math.isfinite(self.max_backoff_s)):
            raise ClientError("RetryPolicy needs 0 <= initial_backoff_s <= max_backoff_s < inf")
        if not (self.multiplier >= 1 and math.isfinite(self.multiplier)):
            raise ClientError(f"RetryPolicy.multiplier must be >= 1, got {self.multiplier}")

    def backoff_s(self, retry: int, rng: random.Random = _RANDOM) -> float:
        """Pause before retry number `retry` (0 for the first): uniform in [0, capped exponential]."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier**retry)
        return rng.uniform(0.0, ceiling)


NO_RETRY = RetryPolicy(attempts=1)
DEFAULT_RETRY = RetryPolicy()


class RetryBudget:
    """The attempts of one call: time left for the next one, and the pause after a failed one."""

    def __init__(self, policy: RetryPolicy, timeout_s: float, what: str,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random = _RANDOM) -> None:
        self.policy, self.what, self._clock, self._rng = policy, what, clock, rng
        self._end = clock() + timeout_s
        self.failures = 0

    def remaining(self) -> float:
        return self._end - self._clock()

    def pause_after(self, exc: ClientError) -> float:
        """Seconds to wait before the next attempt; raises `exc` when it is final."""
        self.failures += 1
        if not isinstance(exc, ServerUnavailableError) or self.failures >= self.policy.attempts:
            raise exc
        pause = self.policy.backoff_s(self.failures - 1, self._rng)
        if isinstance(exc, ServerBusyError) and exc.retry_after_s is not None:
            pause += exc.retry_after_s  # the jitter on top keeps refused clients from returning together
        if pause >= self.remaining():
            raise exc
        logger.debug("%s: attempt %d failed (%s); retrying in %.2f s", self.what, self.failures, exc, pause)
        return pause

    def next_timeout(self) -> float:
        """The time the next attempt may take: what is left of the deadline."""
        left = self.remaining()
        if left <= 0:
            raise ClientTimeoutError(f"{self.what}: deadline passed after {self.failures} attempt(s)")
        return left


def call_with_retries(attempt: Callable[[float], T], policy: RetryPolicy, timeout_s: float, what: str,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """``attempt(seconds_left)`` until it succeeds, fails for good, or the deadline passes."""
    budget = RetryBudget(policy, timeout_s, what)
    while True:
        try:
            return attempt(budget.next_timeout())
        except ClientError as exc:
            sleep(budget.pause_after(exc))


async def acall_with_retries(attempt: Callable[[float], Awaitable[T]], policy: RetryPolicy, timeout_s: float,
                             what: str) -> T:
    """The asyncio form of `call_with_retries`."""
    budget = RetryBudget(policy, timeout_s, what)
    while True:
        try:
            return await attempt(budget.next_timeout())
        except ClientError as exc:
            await asyncio.sleep(budget.pause_after(exc))
