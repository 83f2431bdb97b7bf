"""Time in a stream: when a played file's or a generated camera's frames are due, which frames ``--fps`` keeps
from a live source, and what a camera with one request in flight sends and drops (the Locust camera user)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FrameClock:
    """A camera that started at ``start`` (monotonic seconds): frame k is due at ``start + k / fps``."""

    fps: float
    start: float

    def __post_init__(self) -> None:
        if not (self.fps > 0 and math.isfinite(self.fps)):
            raise ValueError(f"frames per second must be a positive number, got {self.fps!r}")

    def due(self, frame: int) -> float:
        return self.start + frame / self.fps

    def latest(self, now: float) -> int:
        """The newest frame due by ``now`` (-1 before the first)."""
        if now < self.start:
            return -1
        return math.floor((now - self.start) * self.fps + 1e-9)


def next_frame(clock: FrameClock, last_sent: int, now: float) -> tuple[int, int, float]:
    """Latest-frame-wins for a camera whose previous request (frame ``last_sent``, -1 for none) just ended.

    Returns (the frame to send next, how many frames came due meanwhile and are dropped unseen, seconds to wait
    until that frame is due: 0 when it is already late).
    """
    latest = clock.latest(now)
    if latest > last_sent:
        return latest, latest - last_sent - 1, 0.0
    upcoming = last_sent + 1
    return upcoming, 0, max(0.0, clock.due(upcoming) - now)


class Sampler:
    """Keep at most ``fps`` frames a second of a live source, evenly spaced, without bursts after a gap."""

    def __init__(self, fps: float | None) -> None:
        if fps is not None and not (fps > 0 and math.isfinite(fps)):
            raise ValueError(f"--fps must be a positive number, got {fps!r}")
        self._interval = 0.0 if fps is None else 1.0 / fps
        self._next: float | None = None

    def keep(self, t: float) -> bool:
        """Whether the frame captured at ``t`` (seconds, any origin) is kept."""
        if self._interval == 0.0:
            return True
        tolerance = min(0.002, self._interval / 10)  # source clocks jitter by a millisecond
        if self._next is not None and t < self._next - tolerance:
            return False
        self._next = t + self._interval if self._next is None or t - self._next > self._interval \
            else self._next + self._interval
        return True
