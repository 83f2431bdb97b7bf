"""The asyncio side of one stream: take the newest frame when a request slot is free, encode it once, send it,
and hand the answers on in frame order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from clients.detection import DetectionResult
from clients.errors import ClientError, ServerBusyError
from clients.stream.frame import Frame, payload
from clients.stream.ordering import InOrder
from clients.stream.slot import LatestSlot
from clients.stream.stats import StreamStats, answer_counts

logger = logging.getLogger(__name__)
Detect = Callable[[bytes], Awaitable[DetectionResult]]
# After a refusal under overload the request slot stays taken this long, or the Retry-After the server named,
# at most BUSY_MAX_S: the newest frame still goes next, and the frames meanwhile are dropped as usual.
BUSY_PAUSE_S = 0.5
BUSY_MAX_S = 5.0


@dataclass(frozen=True)
class Answer:
    """One answered frame: what every sink (JSON lines, video, tracker) receives."""

    stream: str
    frame: Frame
    jpeg: bytes
    result: DetectionResult
    latency_ms: float


class Sender:
    """Keeps at most ``in_flight`` requests of one stream open; frames that wait meanwhile are replaced (dropped)
    by newer ones in the slot."""

    def __init__(self, name: str, slot: LatestSlot[Frame], stats: StreamStats, detect: Detect,
                 emit: Callable[[Answer], None], in_flight: int = 1, jpeg_quality: int = 90) -> None:
        if in_flight < 1:
            raise ClientError(f"--in-flight must be at least 1, got {in_flight}")
        self.name, self._slot, self._stats, self._detect, self._emit = name, slot, stats, detect, emit
        self._room = asyncio.Semaphore(in_flight)
        self._quality = jpeg_quality
        self._order: InOrder[Answer] = InOrder()
        self._wake = asyncio.Event()
        self._sequence = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._reported: str | None = None
        self._stopping = False

    def wake(self) -> None:
        """Called (through the loop) whenever the reader put a frame or finished."""
        self._wake.set()

    def stop(self) -> None:
        """Send nothing more; requests in flight still come back (a frame left in the slot is counted as left)."""
        self._stopping = True
        self._wake.set()

    async def _next(self, source_done: Callable[[], bool]) -> Frame | None:
        while not self._stopping:
            self._wake.clear()
            frame = self._slot.take()
            if frame is not None:
                return frame
            if source_done():
                return None
            await self._wake.wait()
        return None

    async def run(self, source_done: Callable[[], bool]) -> None:
        """Until the source is done and every request has come back (or the task is cancelled)."""
        try:
            while True:
                await self._room.acquire()  # first a free request slot, then the newest frame: latest wins
                frame = await self._next(source_done)
                if frame is None:
                    self._room.release()
                    break
                task = asyncio.create_task(self._one(frame, self._sequence))
                self._sequence += 1
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if self._tasks:
                await asyncio.gather(*self._tasks)
        finally:
            for task in self._tasks:
                task.cancel()

    async def _one(self, frame: Frame, sequence: int) -> None:
        answer: Answer | None = None
        try:
            self._stats.add(sent=1)
            data = frame.jpeg if frame.jpeg is not None else await asyncio.to_thread(payload, frame, self._quality)
            result = await self._detect(data)
        except ServerBusyError as exc:
            self._stats.add(refused=1)
            self._report(str(exc))
            await asyncio.sleep(min(BUSY_MAX_S, exc.retry_after_s or BUSY_PAUSE_S))  # back-pressure, not a fault
        except ClientError as exc:
            self._stats.add(failed=1)
            self._stats.error(str(exc), source=False)
            self._report(str(exc))
        except asyncio.CancelledError:
            self._stats.add(failed=1)
            raise
        else:
            latency_ms = (time.monotonic() - frame.captured) * 1000.0
            self._stats.latency(latency_ms)
            self._stats.carried(answer_counts(result))
            answer = Answer(self.name, frame, data, result, latency_ms)
            self._reported = None
        finally:
            self._room.release()
        for ready in self._order.done(sequence, answer):
            self._emit(ready)

    def _report(self, message: str) -> None:
        """Log a failing server once per kind of failure, not once per frame."""
        if message != self._reported:
            logger.error("stream %s: request failed: %s", self.name, message)
            self._reported = message
