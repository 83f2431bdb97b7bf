"""The steady load and the scenes that the rollout's integration tests (single server and fleet) send."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clients import NO_RETRY, DetectionClient
from clients.canary import CanaryClient
from generator.synthetic import encode, make_scene
from tests.helpers import LoadTally, TalliedLoad

KEY = "5" * 64
WINDOW_S = 8.0


@dataclass
class SteadyLoad(TalliedLoad):
    """Two client threads sending scenes back to back through a CanaryClient that follows the route file."""

    grpc_url: str
    route_file: Path
    images: list[bytes]
    tally: LoadTally = field(default_factory=LoadTally)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]

    def _run(self) -> None:
        # No retries: a request the rollout drops must show as an error, not be hidden by a second attempt.
        make = lambda model: DetectionClient(self.grpc_url, model=model, timeout_s=20, retry=NO_RETRY)  # noqa: E731
        with CanaryClient(make, route_file=self.route_file) as client:
            self.tally.send_until(self._stop, client.detect, self.images)
            with self._lock:
                for model, count in client.counts.items():
                    self.counts[model] = self.counts.get(model, 0) + count

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def rollout_scenes() -> list[bytes]:
    """Seven scenes: every 4th request of a thread goes to the canary (25 %), so both sides see every scene."""
    rng = np.random.default_rng(19)
    return [encode(make_scene(rng, 640, 480).image, ".jpg") for _ in range(7)]
