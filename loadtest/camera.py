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

from .errors import CorpusError
from .users import TritonGrpcUser, TritonHttpUser, TritonUser, UserSettings, corpus_for


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
_VIDEO_FRAMES: dict[tuple[Path, int], list[bytes]] = {}
_NUMBERS = iter(range(1, 1_000_000))
_NUMBERS_LOCK = threading.Lock()


def video_frames(path: Path, limit: int = 600) -> list[bytes]:
    """The first ``limit`` frames of a video file, decoded with PyAV and JPEG-encoded once per process."""
    key = (path, limit)
    if key not in _VIDEO_FRAMES:
        from clients.stream.decode import DecodeOptions, open_video
        from clients.stream.frame import encode_jpeg
        from clients.stream.sources import parse_source

        video = open_video(parse_source(str(path)), DecodeOptions())
        try:
            frames = []
            for decoded in video.frames(lambda: None):
                if decoded.image is not None:
                    frames.append(encode_jpeg(decoded.image))
                if len(frames) >= limit:
                    break
        finally:
            video.close()
        if not frames:
            raise CorpusError(f"no video frames in {path}")
        _VIDEO_FRAMES[key] = frames
    return _VIDEO_FRAMES[key]


class CameraMixin(TritonUser):
    """Replaces the closed loop of ``TritonUser`` with a camera's clock."""

    abstract = True

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        options = environment.parsed_options
        self.fps = float(getattr(options, "triton_camera_fps", None) or 5.0)
        video = getattr(options, "triton_video", "") or ""
        self.images = video_frames(Path(video)) if video else corpus_for(UserSettings.from_options(options))
        with _NUMBERS_LOCK:
            number = next(_NUMBERS)
        worker = getattr(environment.runner, "worker_index", 0)
        self.camera = f"camera-{worker}-{number:03d}"
        self._clock: FrameClock | None = None
        self._last = -1

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
        request = self._requests[index % len(self._requests)]
        start_time = time.time()
        received, error = 0, None
        try:
            received = self.send(request, self.model())
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
