"""Where a step's ``execute`` spends its wall time: phases timed per batch, published with the step's telemetry.

Triton's statistics give a Python step's compute as one number, which holds the stub's own messaging (requests
and responses through shared memory, GPU buffers handed over) as well as the step's work. Each step marks the
end of every phase of a batch (``PhaseClock.lap``, two clock reads and a dict update) and adds the batch's
seconds per phase to its tally; the publisher makes them counters once a second (``telemetry.Publisher``). So
Triton's compute less the sum of the phases is what lies around ``execute``, and the phases say what lies in it.

Phases on the GPU end where the host stops waiting: a kernel launch returns at once and its time shows up in
the phase that next waits for the stream (``synchronize``, or the detector's copy of its outputs to the host).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .contract import BATCHES_METRIC, PHASE_SECONDS_METRIC
from .telemetry import Counts, Series

# Marks the end of a phase; steps pass one down to code that may run without a clock (``no_lap``).
Lap = Callable[[str], None]

# Each step's phases in the order a batch goes through them.
PREPROCESS_PHASES = ("inputs", "decode", "letterbox", "responses")
# to_host: --gpu-handoff host, the batch's one copy to host memory
GPU_PREPROCESS_PHASES = ("inputs", "triage", "decode", "cpu_path", "letterbox", "synchronize", "to_host", "responses")
DETECTOR_PHASES = ("inputs", "run", "responses")
# --detector-spin alone: a run that found no other instance running, on the spinning session, is "run_alone".
ALONE_DETECTOR_PHASES = ("inputs", "run", "run_alone", "responses")
GPU_DETECTOR_PHASES = ("inputs", "run", "to_host", "responses")
NMS_PHASES = ("inputs", "nms", "responses")
# All of them in one order, for reports.
ALL_PHASES = ("inputs", "triage", "decode", "cpu_path", "letterbox", "synchronize", "run", "run_alone", "to_host",
              "nms", "responses")


def no_lap(phase: str) -> None:
    """A lap nobody times."""


def phase_series(phases: Sequence[str]) -> list[Series]:
    """Every series of a step's phases, so that each exists (at 0) from the start, and its batch count."""
    return [*((PHASE_SECONDS_METRIC, (("phase", p),)) for p in phases), (BATCHES_METRIC, ())]


class PhaseClock:
    """One batch's phases: ``lap(name)`` ends the phase ``name`` (the time since the previous lap, or the start);
    a phase lapped more than once (once per image) adds up."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._last = clock()
        self._spent: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = self._clock()
        self._spent[phase] = self._spent.get(phase, 0.0) + (now - self._last)
        self._last = now

    def counts(self) -> Counts:
        """The batch's increments: seconds per phase and one batch."""
        counts: Counts = {(PHASE_SECONDS_METRIC, (("phase", p),)): s for p, s in self._spent.items()}
        counts[(BATCHES_METRIC, ())] = 1.0
        return counts
