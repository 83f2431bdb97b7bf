"""Run many streams against the ensemble in one process: one reader thread and one sender per source, one
asyncio detection client for all of them (its gRPC channel multiplexes the requests)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clients.async_client import AsyncDetectionClient
from clients.detection import ModelInfo
from clients.retry import NO_RETRY
from clients.stream.decode import DecodeOptions, open_video
from clients.stream.frame import DEFAULT_JPEG_QUALITY, Frame
from clients.stream.reader import Opener, Reader, ReaderSettings
from clients.stream.sender import Answer, Sender
from clients.stream.slot import LatestSlot
from clients.stream.sources import SourceSpec
from clients.stream.stats import StreamStats

logger = logging.getLogger(__name__)
Sink = Callable[[Answer], None]


@dataclass(frozen=True)
class StreamSettings:
    """How the streams talk to the server; the reader's and decoder's settings ride along."""

    url: str = "127.0.0.1:8001"
    protocol: str | None = None
    model: str = "yolo"
    timeout_s: float = 5.0  # per frame: an answer later than this is worth nothing to a camera
    in_flight: int = 1  # requests of one stream open at once
    queue: int = 1  # frames waiting per stream (latest-frame-wins beyond it)
    jpeg_quality: int = DEFAULT_JPEG_QUALITY
    duration_s: float | None = None
    warmup_s: float = 0.0  # counters start again after this (the sizing ramp)
    admin_key: str | None = None
    model_info: ModelInfo | None = None
    client_options: dict[str, Any] = field(default_factory=dict)
    reader: ReaderSettings = field(default_factory=ReaderSettings)
    decode: DecodeOptions = field(default_factory=DecodeOptions)


@dataclass
class _Stream:
    spec: SourceSpec
    slot: LatestSlot[Frame]
    stats: StreamStats
    reader: Reader
    sender: Sender


async def run_streams(specs: Sequence[SourceSpec], settings: StreamSettings, sinks: Sequence[Sink] = (),
                      opener: Opener | None = None, stop: asyncio.Event | None = None,
                      on_start: Callable[[list[StreamStats]], None] | None = None) -> list[dict[str, Any]]:
    """Stream every source until ``duration_s`` passes, every source ended, or ``stop`` is set; return the
    per-stream summaries. The server must be ready at the start; later failures are counted per frame."""
    stop = stop or asyncio.Event()
    halt = threading.Event()
    async with AsyncDetectionClient(settings.url, settings.protocol, settings.model, settings.timeout_s,
                                    retry=NO_RETRY, admin_key=settings.admin_key, model_info=settings.model_info,
                                    client_options=settings.client_options) as client:
        await client.wait_until_ready(settings.timeout_s)
        await client.model_info()

        def emit(answer: Answer) -> None:
            for sink in sinks:
                sink(answer)

        loop = asyncio.get_running_loop()
        streams = [_make(spec, settings, opener, client.detect, emit, loop, halt) for spec in specs]
        if on_start is not None:
            on_start([s.stats for s in streams])
        for stream in streams:
            stream.reader.start()
        senders = [asyncio.create_task(s.sender.run(s.reader.finished.is_set)) for s in streams]
        try:
            await _wait(senders, stop, settings, streams)
        finally:
            halt.set()
            for stream in streams:
                stream.sender.stop()
            await _drain(senders, settings.timeout_s)
            await asyncio.to_thread(_join, [s.reader for s in streams], settings.decode.read_timeout_s + 1)
            for stream in streams:
                stream.stats.add(left=stream.slot.discard())
    return [s.stats.summary() for s in streams]


def _join(readers: Sequence[Reader], timeout_s: float) -> None:
    """Wait for the readers together, at most ``timeout_s`` in all: one blocked in a silent source's read leaves
    within its read timeout, and a daemon thread that does not cannot hold the process."""
    deadline = time.monotonic() + timeout_s
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))


def _make(spec: SourceSpec, settings: StreamSettings, opener: Opener | None, detect: Any, emit: Sink,
          loop: asyncio.AbstractEventLoop, halt: threading.Event) -> _Stream:
    slot: LatestSlot[Frame] = LatestSlot(settings.queue)
    stats = StreamStats(spec.name)
    sender = Sender(spec.name, slot, stats, detect, emit, settings.in_flight, settings.jpeg_quality)

    def notify() -> None:
        if not loop.is_closed():  # a reader still leaving a blocked read after the run has nothing to wake
            loop.call_soon_threadsafe(sender.wake)

    chosen = opener or (lambda s: open_video(s, settings.decode))
    reader = Reader(spec, chosen, slot, stats, notify, settings.reader, halt)
    return _Stream(spec, slot, stats, reader, sender)


async def _wait(senders: list[asyncio.Task[None]], stop: asyncio.Event, settings: StreamSettings,
                streams: list[_Stream]) -> None:
    """Until the duration passes, stop is set, or every sender finished; resets the counters after the warm-up."""
    start = time.monotonic()
    deadline = start + settings.duration_s if settings.duration_s is not None else float("inf")
    warm_at = start + settings.warmup_s if settings.warmup_s > 0 else None
    stopper = asyncio.create_task(stop.wait())
    try:
        while not stop.is_set():
            running = [task for task in senders if not task.done()]
            now = time.monotonic()
            if warm_at is not None and now >= warm_at:
                for stream in streams:
                    stream.stats.reset()
                warm_at = None
            if not running or now >= deadline:
                return
            target = min(deadline, warm_at if warm_at is not None else float("inf"))
            await asyncio.wait([stopper, *running], timeout=None if target == float("inf") else target - now,
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()


async def _drain(senders: list[asyncio.Task[None]], timeout_s: float) -> None:
    """Let the readers' stop reach the senders and the requests in flight come back, within one request timeout."""
    if not senders:
        return
    done, pending = await asyncio.wait(senders, timeout=timeout_s + 1)
    for task in pending:
        task.cancel()
    await asyncio.gather(*senders, return_exceptions=True)
    for task in done:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
