"""Per-stream counters and latency quantiles: what the summary at exit, the metrics and the sizing report show.

Invariants the tests hold: every frame read is sent, dropped, or was still waiting when the run stopped
(``read == sent + dropped + left``), and every frame sent is answered, refused (the server busy) or failed. Latency is end to end, from the moment a frame was decoded to
the moment its answer arrived: waiting for a free request slot and the JPEG encoding count, as a camera
operator would count them. Quantiles come from a uniform reservoir of at most ``RESERVOIR`` samples (exact below
that), so a stream that runs for days keeps a bounded memory.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RESERVOIR = 20_000


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linearly interpolated quantile (``q`` in [0, 1]) of sorted values; None when there are none."""
    if not sorted_values:
        return None
    if not 0 <= q <= 1:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low))


@dataclass
class StreamStats:
    """Counters of one stream; the reader thread and the event loop both update them, under one lock."""

    name: str
    read: int = 0  # frames handed to the sender's slot (after --fps sampling)
    skipped: int = 0  # frames left out on purpose by --fps sampling (not drops)
    sent: int = 0
    answered: int = 0
    refused: int = 0  # requests the server refused under overload (back-pressure: not errors)
    failed: int = 0  # requests that got an error (or no answer before shutdown)
    dropped: int = 0  # frames pushed out of the slot by a newer one (latest-frame-wins)
    left: int = 0  # frames still waiting when the run stopped: neither sent nor dropped by the policy
    decode_errors: int = 0
    reconnects: int = 0
    source_errors: int = 0
    last_error: str | None = None
    status: str = "starting"
    # What the answers carried, per kind (detections, keypoints, masks, rotated_boxes, top_classes,
    # classified_boxes): the task's
    outputs: dict[str, int] = field(default_factory=dict)
    _latencies_ms: list[float] = field(default_factory=list, repr=False)
    _seen: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def error(self, message: str, *, source: bool = True) -> None:
        with self._lock:
            self.last_error = message
            if source:
                self.source_errors += 1

    def latency(self, milliseconds: float) -> None:
        """Record one answered frame's end-to-end latency (Algorithm R keeps a uniform sample)."""
        with self._lock:
            self.answered += 1
            self._seen += 1
            if len(self._latencies_ms) < RESERVOIR:
                self._latencies_ms.append(milliseconds)
                return
            slot = self._rng.randrange(self._seen)
            if slot < RESERVOIR:
                self._latencies_ms[slot] = milliseconds

    def carried(self, counts: dict[str, int]) -> None:
        """Add what one answer carried (``answer_counts``)."""
        with self._lock:
            for name, value in counts.items():
                self.outputs[name] = self.outputs.get(name, 0) + value

    def reset(self) -> None:
        """Forget what was counted so far (the sizing ramp's warm-up); the status and last error stay."""
        with self._lock:
            for name in ("read", "skipped", "sent", "answered", "refused", "failed", "dropped", "left",
                         "decode_errors",
                         "reconnects", "source_errors"):
                setattr(self, name, 0)
            self._latencies_ms.clear()
            self.outputs.clear()
            self._seen = 0

    def summary(self) -> dict[str, Any]:
        with self._lock:
            values = sorted(self._latencies_ms)
            offered = self.read
            return {
                "stream": self.name, "status": self.status,
                "read": self.read, "skipped": self.skipped, "sent": self.sent, "answered": self.answered,
                "refused": self.refused, "failed": self.failed, "dropped": self.dropped, "left": self.left,
                "drop_rate": round(self.dropped / offered, 6) if offered else 0.0,
                "mean_ms": _rounded(sum(values) / len(values) if values else None),
                "p50_ms": _rounded(quantile(values, 0.50)), "p95_ms": _rounded(quantile(values, 0.95)),
                "max_ms": _rounded(values[-1] if values else None),
                "decode_errors": self.decode_errors, "reconnects": self.reconnects,
                "source_errors": self.source_errors, "last_error": self.last_error, "outputs": dict(self.outputs),
            }


def answer_counts(result: Any) -> dict[str, int]:
    """What one answer (a ``clients.detection.DetectionResult``) carried: its detections and, per task, their
    keypoints, masks or rotated boxes, or a classifier's top classes; a two-stage ensemble's classified boxes."""
    found = list(result)
    return {"detections": len(found), "keypoints": sum(len(d.keypoints or ()) for d in found),
            "masks": sum(d.mask_rle is not None for d in found),
            "rotated_boxes": sum(d.rotated_box is not None for d in found), "top_classes": len(result.top),
            "classified_boxes": sum(d.classified is not None for d in found)}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def totals(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """All streams together: summed counters, the worst stream's p95 and drop rate (what a sizing limit checks)."""
    keys = ("read", "skipped", "sent", "answered", "refused", "failed", "dropped", "left", "decode_errors",
            "reconnects", "source_errors")
    total: dict[str, Any] = {key: sum(int(s[key]) for s in summaries) for key in keys}
    total["streams"] = len(summaries)
    total["drop_rate"] = round(total["dropped"] / total["read"], 6) if total["read"] else 0.0
    p95s = [s["p95_ms"] for s in summaries if s["p95_ms"] is not None]
    total["worst_p95_ms"] = max(p95s) if p95s else None
    total["worst_drop_rate"] = max((float(s["drop_rate"]) for s in summaries), default=0.0)
    return total
