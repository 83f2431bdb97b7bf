"""What a repository's queues admit: the latency budget, the service time it was sized from, the queue policy.

The build works these out once (generator/builder/stages/admission.py says how and why) and hands the one
:class:`Admission` to the config rendering, which writes the policy into every composing step's
``dynamic_batching``, and to the manifest, which records it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from generator.serving.contract import PRIORITY_LEVELS, PROBE_PRIORITY, USER_PRIORITY

BudgetSource = Literal["explicit", "derived"]


@dataclass(frozen=True)
class LatencyBudget:
    """How long a step may hold a request, and where that number came from."""

    ms: float
    source: BudgetSource  # "explicit": --max-queue-ms, the user's SLA; "derived": from the service time
    basis: str  # how it was set, in words

    def to_json(self) -> dict[str, object]:
        return {"max_queue_ms": self.ms, "budget": self.source, "basis": self.basis}


@dataclass(frozen=True)
class ServiceTime:
    """One batch of ``batch`` images through the three steps, one after another."""

    batch: int
    batch_ms: float
    source: str  # how batch_ms is known
    steps_ms: Mapping[str, float] = field(default_factory=dict)  # per step, when measured
    frame: str = ""  # what one measured image was

    def to_json(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "batch_ms": round(self.batch_ms, 2),
            "steps_ms": {step: round(ms, 2) for step, ms in self.steps_ms.items()},
            "source": self.source,
            "frame": self.frame,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServiceTime:
        return cls(int(data["batch"]), float(data["batch_ms"]), str(data["source"]),
                   {str(k): float(v) for k, v in (data.get("steps_ms") or {}).items()}, str(data.get("frame", "")))


@dataclass(frozen=True)
class QueuePolicy:
    """What every composing model's ``dynamic_batching`` block says about waiting and priorities."""

    timeout_us: int
    max_queue_size: int
    priority_levels: int = PRIORITY_LEVELS
    default_priority_level: int = USER_PRIORITY
    probe_priority_level: int = PROBE_PRIORITY  # its queue has no timeout

    def to_json(self) -> dict[str, int]:
        return {
            "default_timeout_microseconds": self.timeout_us,
            "max_queue_size": self.max_queue_size,
            "priority_levels": self.priority_levels,
            "default_priority_level": self.default_priority_level,
            "probe_priority_level": self.probe_priority_level,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueuePolicy:
        return cls(int(data["default_timeout_microseconds"]), int(data["max_queue_size"]),
                   int(data.get("priority_levels", PRIORITY_LEVELS)),
                   int(data.get("default_priority_level", USER_PRIORITY)),
                   int(data.get("probe_priority_level", PROBE_PRIORITY)))


@dataclass(frozen=True)
class Admission:
    """The budget, the service time behind it (None: a config rendered without one) and the resulting policy.

    ``max_in_flight``: requests the pipeline may hold at once, all steps together, for the budget to hold end to
    end; enforced in front of Triton (the deployed proxy). None in manifests written before it existed.
    """

    budget: LatencyBudget
    policy: QueuePolicy
    service: ServiceTime | None = None
    max_in_flight: int | None = None

    def to_json(self) -> dict[str, object]:
        service = self.service.to_json() if self.service is not None else None
        return {**self.budget.to_json(), "service": service, "queue_policy": self.policy.to_json(),
                "max_in_flight": self.max_in_flight}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Admission:
        source = str(data["budget"])
        if source not in ("explicit", "derived"):
            raise ValueError(f"unknown budget source {source!r}")
        budget = LatencyBudget(float(data["max_queue_ms"]), source, str(data.get("basis", "")))  # type: ignore[arg-type]
        service = data.get("service")
        in_flight = data.get("max_in_flight")
        return cls(budget, QueuePolicy.from_json(data["queue_policy"]),
                   ServiceTime.from_json(service) if service is not None else None,
                   int(in_flight) if in_flight is not None else None)
