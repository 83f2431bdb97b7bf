"""What a stream run prints: one JSON object per answered frame on stdout, a per-stream table at the end."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from clients.stream.sender import Answer


def answer_record(answer: Answer) -> dict[str, Any]:
    """The JSON line of one answered frame (the contract: ``stream``, ``frame``, ``detections``, and more; a
    classifier's ``top`` classes too)."""
    frame = answer.frame
    top = {"top": [c.as_dict() for c in answer.result.top]} if answer.result.top else {}
    return {
        "stream": answer.stream,
        "frame": frame.index,
        "timestamp": round(frame.wall, 3),
        "pts_s": None if frame.pts_s is None else round(frame.pts_s, 4),
        "latency_ms": round(answer.latency_ms, 2),
        "detections": [d.as_dict() for d in answer.result],
        **top,
    }


class JsonLines:
    """A sink writing one line per answer, flushed, so a pipe reader sees each frame as it is answered."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, answer: Answer) -> None:
        self._out.write(json.dumps(answer_record(answer)) + "\n")
        self._out.flush()


def summary_table(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Fixed-width lines: one per stream, counts and end-to-end latency."""
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    width = max([6, *(len(s["stream"]) for s in summaries)])
    lines = [f"{'stream':<{width}}  {'status':<12} {'read':>6} {'sent':>6} {'answered':>8} {'dropped':>7} "
             f"{'refused':>7} {'failed':>6} {'reconn':>6} {'p50 ms':>7} {'p95 ms':>7}"]
    for s in summaries:
        lines.append(f"{s['stream']:<{width}}  {s['status']:<12} {s['read']:>6} {s['sent']:>6} {s['answered']:>8} "
                     f"{s['dropped']:>7} {s['refused']:>7} {s['failed']:>6} {s['reconnects']:>6} {ms(s['p50_ms']):>7} "
                     f"{ms(s['p95_ms']):>7}")
        if s["last_error"] and (s["status"] == "failed" or not s["answered"]):
            lines.append(f"{'':<{width}}  last error: {s['last_error']}")
    return lines
