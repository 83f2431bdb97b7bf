"""How long a request waited in a step's queue while an instance of that step sat idle, from Triton's traces.

A request waits in a step's queue (REQUEST_START -> COMPUTE_START). While every instance is running a batch that
wait is the price of the load; while fewer than ``instances`` executions run, an instance was free and the batcher
did not hand the request over: that part is the *idle wait*. Executions are read from the same traces (each
distinct COMPUTE_START..COMPUTE_END of the step is one batch on one instance), so the requests of the window must
all be traced. A healthy batcher keeps it under a millisecond (the time to form the batch); Triton's batcher under a
queue policy can strand a request behind a step's only instance until the next request arrives or 500 ms pass
(generator/builder/stages/config/stranding.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from .trace_steps import Trace

Interval = tuple[int, int]
# Most of the batcher's 500 ms sleep (generator/builder/stages/config/stranding.py): a wait this long was one.
FULL_SLEEP_MS = 400.0


def _executions(steps: Sequence[Trace]) -> list[Interval]:
    return sorted({(s.stamps["COMPUTE_START"], s.stamps["COMPUTE_END"]) for s in steps
                   if "COMPUTE_START" in s.stamps and "COMPUTE_END" in s.stamps})


def _idle_ns(start: int, end: int, executions: Sequence[Interval], instances: int) -> int:
    """Nanoseconds of [start, end) during which fewer than ``instances`` executions ran."""
    edges = sorted({start, end, *(t for e in executions for t in e if start < t < end)})
    idle = 0
    for left, right in itertools.pairwise(edges):
        running = sum(1 for s, e in executions if s <= left and e >= right)
        if running < instances:
            idle += right - left
    return idle


def idle_waits(tops: Sequence[Trace], instances: Mapping[str, int]) -> dict[str, list[float]]:
    """Per step (of ``instances``): each started request's idle wait in ms, in the order of the requests."""
    by_step: dict[str, list[Trace]] = {}
    for top in tops:
        for step in top.children:
            by_step.setdefault(step.model, []).append(step)
    waits: dict[str, list[float]] = {}
    for model, steps in by_step.items():
        if model not in instances:
            continue
        executions = _executions(steps)
        waits[model] = [_idle_ns(s.stamps["REQUEST_START"], s.stamps["COMPUTE_START"], executions,
                                 instances[model]) / 1e6
                        for s in steps if "REQUEST_START" in s.stamps and "COMPUTE_START" in s.stamps]
    return waits


def summary(waits: Sequence[float], threshold_ms: float = 5.0) -> dict[str, float]:
    """Share of requests over ``threshold_ms`` of idle wait, their mean, the longest, and how many waited out
    most of the batcher's sleep (``full_sleeps``)."""
    over = [w for w in waits if w > threshold_ms]
    return {"requests": len(waits), "over": len(over), "share_over": len(over) / len(waits) if waits else 0.0,
            "mean_over_ms": sum(over) / len(over) if over else 0.0, "max_ms": max(waits, default=0.0),
            "full_sleeps": sum(1 for w in waits if w >= FULL_SLEEP_MS)}
