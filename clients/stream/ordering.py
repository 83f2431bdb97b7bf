"""Answers leave in frame order: with several requests of one stream in flight, a later frame's answer may
arrive first; it waits here until every earlier frame of the stream is answered or has failed."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class InOrder(Generic[T]):
    """Release results by a per-stream sequence number (0, 1, 2, ... in the order frames were sent)."""

    def __init__(self) -> None:
        self._next = 0
        self._waiting: dict[int, T | None] = {}

    def done(self, sequence: int, result: T | None) -> list[T]:
        """Record the outcome of ``sequence`` (None: the request failed, nothing to emit); return what may leave
        now, in order."""
        if sequence < self._next or sequence in self._waiting:
            raise ValueError(f"sequence {sequence} was already completed")
        self._waiting[sequence] = result
        ready: list[T] = []
        while self._next in self._waiting:
            item = self._waiting.pop(self._next)
            self._next += 1
            if item is not None:
                ready.append(item)
        return ready

    @property
    def pending(self) -> int:
        """Completed results held back behind an earlier frame still in flight."""
        return len(self._waiting)
