"""Locust camera users: one user is one camera sending F frames a second, so N users are N cameras.

A camera does not wait for the server. Its frames come due on a clock (``FrameClock``); with one request in flight,
the frames that come due while it is out are dropped except the newest, which goes next: latest-frame-wins, the
policy of ``python -m clients.stream`` (``clients.stream.pacing.next_frame``). Each camera reports under its own name,
so Locust's statistics give each camera's latency percentiles; the response time is end to end, from the moment the
frame was due (captured) to its answer, so a frame sent late counts its wait. Frames due, sent and dropped are
counted per camera here and, in distributed runs, summed on the master from the workers' reports.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from locust.env import Environment

from clients.stream.pacing import FrameClock, next_frame

from .images import video_frames
from .users import TritonGrpcUser, TritonHttpUser, TritonUser


@dataclass
class CameraCounts:
    frames: int = 0  # frames that came due
    sent: int = 0
    dropped: int = 0

    def add(self, other: dict[str, int]) -> None:
        self.frames += int(other.get("frames", 0))
        self.sent += int(other.get("sent", 0))
        self.dropped += int(other.get("dropped", 0))


class CameraBook:
    """The per-camera counts of this process (a worker sends them to the master, which merges them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, CameraCounts] = {}
        self._unsent: dict[str, CameraCounts] = {}

    def count(self, camera: str, frames: int, sent: int, dropped: int) -> None:
        with self._lock:
            for book in (self.counts, self._unsent):
                book.setdefault(camera, CameraCounts()).add({"frames": frames, "sent": sent, "dropped": dropped})

    def merge(self, report: dict[str, dict[str, int]]) -> None:
        with self._lock:
            for camera, counts in report.items():
                self.counts.setdefault(camera, CameraCounts()).add(counts)

    def take_report(self) -> dict[str, dict[str, int]]:
        """What changed since the last report (a worker's share for the master)."""
        with self._lock:
            report = {name: vars(c).copy() for name, c in self._unsent.items()}
            self._unsent.clear()
            return report


BOOK = CameraBook()
_NUMBERS = iter(range(1, 1_000_000))
_NUMBERS_LOCK = threading.Lock()


class CameraMixin(TritonUser):
    """Replaces the closed loop of ``TritonUser`` with a camera's clock."""

    abstract = True

    def __init__(self, environment: Environment) -> None:
        options = environment.parsed_options
        self.fps = float(getattr(options, "triton_camera_fps", None) or 5.0)
        self._video = str(getattr(options, "triton_video", "") or "")
        super().__init__(environment)
        with _NUMBERS_LOCK:
            number = next(_NUMBERS)
        worker = getattr(environment.runner, "worker_index", 0)
        self.camera = f"camera-{worker}-{number:03d}"
        self._clock: FrameClock | None = None
        self._last = -1

    def load_images(self) -> list[bytes]:
        """The video's frames (decoded and encoded once per process), else the image corpus."""
        return video_frames(Path(self._video)) if self._video else super().load_images()

    def wait_time(self) -> float:
        return 0.0  # the camera's clock paces it (see frame())

    def frame(self) -> None:
        """Wait for the next frame to come due (or take the newest one that already has), send it, report it."""
        if self._clock is None:
            self._clock = FrameClock(self.fps, time.monotonic())
        index, dropped, wait = next_frame(self._clock, self._last, time.monotonic())
        if wait > 0:
            time.sleep(wait)  # gevent-patched: other cameras run meanwhile
        BOOK.count(self.camera, frames=index - self._last, sent=1, dropped=dropped)
        self._last = index
        start_time = time.time()
        received, error = 0, None
        try:
            received = self.send(self.request(index), self.model())
        except Exception as exc:  # noqa: BLE001 -- every failure is a data point for Locust, not a crash
            error = exc
        self.environment.events.request.fire(
            request_type=self.protocol, name=self.camera,
            response_time=(time.monotonic() - self._clock.due(index)) * 1000.0,
            response_length=received, response=None, context={}, exception=error, start_time=start_time,
            url=self.host,
        )


class CameraGrpcUser(CameraMixin, TritonGrpcUser):
    abstract = True


class CameraHttpUser(CameraMixin, TritonHttpUser):
    abstract = True


# The closed-loop task of TritonUser is inherited by Locust's metaclass; a camera has only its clock's task.
CameraGrpcUser.tasks = [CameraMixin.frame]
CameraHttpUser.tasks = [CameraMixin.frame]


def camera_report(environment: Environment) -> list[dict[str, Any]]:
    """Per camera: frames due, sent, dropped, drop rate, and Locust's end-to-end percentiles of its answers."""
    rows = []
    for camera, counts in sorted(BOOK.counts.items()):
        entry = next((e for (name, _), e in environment.stats.entries.items() if name == camera), None)
        answered = entry.num_requests - entry.num_failures if entry else 0

        def pct(q: float, entry: Any = entry, answered: int = answered) -> float | None:
            return float(entry.get_response_time_percentile(q)) if entry and answered else None

        rows.append({"camera": camera, "frames": counts.frames, "sent": counts.sent, "dropped": counts.dropped,
                     "drop_rate": round(counts.dropped / counts.frames, 4) if counts.frames else 0.0,
                     "failures": entry.num_failures if entry else 0, "p50_ms": pct(0.5), "p95_ms": pct(0.95)})
    return rows
