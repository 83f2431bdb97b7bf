"""One thread per source: open, decode, pace, hand the newest frame over, and reopen with back-off when it stops.

Decoding blocks (network reads, FFmpeg), so it lives in a thread; the thread never waits for the sender: it puts
each frame into the stream's ``LatestSlot`` and goes on. A stop is noticed between frames and at every pause;
a read blocked on a silent network source returns within the read timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from clients.stream.backoff import Backoff
from clients.stream.decode import FatalSourceError, SourceError, Video
from clients.stream.frame import Frame
from clients.stream.pacing import Sampler
from clients.stream.slot import LatestSlot
from clients.stream.sources import SourceSpec
from clients.stream.stats import StreamStats

logger = logging.getLogger(__name__)
Opener = Callable[[SourceSpec], Video]


@dataclass(frozen=True)
class ReaderSettings:
    fps: float | None = None  # keep at most this many frames a second (None: every frame)
    loop: bool = False  # play a file again when it ends
    max_frames: int | None = None  # stop the stream after this many frames
    reconnect_initial_s: float = 0.5
    reconnect_max_s: float = 10.0
    max_reconnects: int | None = None  # None: a live source is reopened for as long as the run lasts


class Reader(threading.Thread):
    def __init__(self, spec: SourceSpec, opener: Opener, slot: LatestSlot[Frame], stats: StreamStats,
                 notify: Callable[[], None], settings: ReaderSettings, stop: threading.Event) -> None:
        super().__init__(name=f"stream-{spec.name}", daemon=True)
        self.spec, self._open, self._slot, self._stats = spec, opener, slot, stats
        self._notify, self._settings, self._halt = notify, settings, stop
        self._sampler = Sampler(settings.fps)
        self._index = 0
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a reader must end with a reason, never silently
            logger.exception("stream %s: reader crashed", self.spec.name)
            self._stats.error(f"reader crashed: {exc}")
            self._stats.status = "failed"
        finally:
            self.finished.set()
            self._notify()

    def _run(self) -> None:
        backoff = Backoff(self._settings.reconnect_initial_s, self._settings.reconnect_max_s)
        attempts = 0
        while not self._halt.is_set():
            delivered, ended = self._session()
            if self._halt.is_set() or self._done_counting():
                break
            if delivered:
                backoff.reset()
            if self._stats.status == "failed":
                return
            if ended and not self.spec.live and not self._settings.loop:
                self._stats.status = "ended"
                return
            if ended and not self.spec.live:
                continue  # --loop: play the file again at once
            if self._settings.max_reconnects is not None and attempts >= self._settings.max_reconnects:
                self._stats.status = "failed"
                logger.error("stream %s: giving up after %d reconnects", self.spec.name, attempts)
                return
            attempts += 1
            pause = backoff.next()
            self._stats.status = "reconnecting"
            logger.info("stream %s: reopening %s in %.1f s", self.spec.name, self.spec.shown, pause)
            if self._halt.wait(pause):
                break
            self._stats.add(reconnects=1)
        if self._stats.status not in ("failed", "ended"):
            self._stats.status = "ended" if self._done_counting() else "stopped"

    def _session(self) -> tuple[int, bool]:
        """Open once and read until the source ends or fails: (frames delivered, ended normally)."""
        delivered = 0
        try:
            video = self._open(self.spec)
        except SourceError as exc:
            self._failed(exc)
            return 0, False
        try:
            self._stats.status = "running"
            opened = time.monotonic()
            for decoded in video.frames(lambda: self._stats.add(decode_errors=1)):
                if self._halt.is_set() or self._done_counting():
                    return delivered, False
                if not self.spec.live and decoded.pts_s is not None and not self._pace(opened + decoded.pts_s):
                    return delivered, False
                now = time.monotonic()
                if not self._sampler.keep(now):
                    self._stats.add(skipped=1)
                    continue
                frame = Frame(self._index, now, time.time(), decoded.pts_s, decoded.image, decoded.jpeg)
                self._index += 1
                delivered += 1
                pushed = self._slot.put(frame)
                self._stats.add(read=1, dropped=pushed)
                self._notify()
            if self.spec.live:
                self._stats.error(f"{self.spec.shown} ended")
                logger.warning("stream %s: %s ended", self.spec.name, self.spec.shown)
            return delivered, True
        except SourceError as exc:
            self._failed(exc)
            return delivered, False
        finally:
            video.close()

    def _pace(self, due: float) -> bool:
        """Wait until a played file's frame is due, as a camera would deliver it; False when stopped meanwhile."""
        delay = due - time.monotonic()
        return delay <= 0 or not self._halt.wait(delay)

    def _failed(self, exc: SourceError) -> None:
        self._stats.error(str(exc))
        logger.error("stream %s: %s", self.spec.name, exc)
        if isinstance(exc, FatalSourceError):
            self._stats.status = "failed"

    def _done_counting(self) -> bool:
        limit = self._settings.max_frames
        return limit is not None and self._index >= limit
