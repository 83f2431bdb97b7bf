"""Latest-frame-wins: the bounded hand-over between a stream's reader and its sender.

A camera does not wait for the server. When the sender is busy, a new frame pushes out the oldest one waiting,
and that frame is counted as dropped: memory stays bounded and the server always gets the freshest frame
(the policy of the reference stream multiplexers; field notes, "Cameras").
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class LatestSlot(Generic[T]):
    """A thread-safe buffer of at most ``capacity`` items that never blocks the producer."""

    def __init__(self, capacity: int = 1) -> None:
        if capacity < 1:
            raise ValueError(f"a frame slot holds at least one frame, got capacity {capacity}")
        self._items: deque[T] = deque()
        self._capacity = capacity
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, item: T) -> int:
        """Add ``item``; return how many older items it pushed out (each counted in ``dropped``)."""
        with self._lock:
            self._items.append(item)
            pushed = max(0, len(self._items) - self._capacity)
            for _ in range(pushed):
                self._items.popleft()
            self.dropped += pushed
            return pushed

    def take(self) -> T | None:
        """The newest item, or None when empty; older ones still waiting are dropped (the sender wants now)."""
        with self._lock:
            if not self._items:
                return None
            item = self._items.pop()
            self.dropped += len(self._items)
            self._items.clear()
            return item

    def discard(self) -> int:
        """Drop whatever waits (at shutdown); return how many."""
        with self._lock:
            count = len(self._items)
            self._items.clear()
            self.dropped += count
            return count

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
