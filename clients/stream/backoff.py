"""How long a stream waits before reopening a source that stopped, failed or could not be reached.

Capped exponential growth with jitter, so many cameras behind one dead switch do not come back in lock-step;
the count starts again once a reopened source delivers frames.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """``next()`` gives the pause before the next reopen; ``reset()`` after a source delivers frames again."""

    initial_s: float = 0.5
    max_s: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.2  # each pause is drawn from [1 - jitter, 1] x the exponential value
    rng: random.Random = field(default_factory=random.Random, repr=False)
    failures: int = 0

    def __post_init__(self) -> None:
        if not (0 < self.initial_s <= self.max_s and math.isfinite(self.max_s)):
            raise ValueError("back-off needs 0 < initial_s <= max_s < inf")
        if not (self.multiplier >= 1 and 0 <= self.jitter < 1):
            raise ValueError("back-off needs multiplier >= 1 and 0 <= jitter < 1")

    def next(self) -> float:
        ceiling = min(self.max_s, self.initial_s * self.multiplier ** self.failures)
        self.failures += 1
        return ceiling * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.failures = 0
