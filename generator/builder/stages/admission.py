"""Overload from a latency budget: the queue policy every composing step's dynamic batcher enforces.

Triton 2.51 cannot bound an ensemble as a whole (it has no queue of its own), so each composing model
sheds load itself:

- ``max_queue_size``: a request that finds a step's queue full is rejected at once with UNAVAILABLE
  ("Exceeds maximum queue size"). This is the fast path, so the queue is sized to hold only what the
  pipeline serves within the budget: ``--max-queue-ms / service time of one batch x --max-batch``, halved
  because steps measured one after another run about half as fast when they share the cores under
  overload (measured on the project's 2-core machine: 122 images/s estimated, 45-95 served), less the batch
  the step is already running, which a request admitted last waits for too.
- ``default_timeout_microseconds`` with ``timeout_action: REJECT``: no step holds a request longer than
  the budget, whatever the estimate said. Triton notices an expired request only when it next forms a
  batch for that step, so this backstop answers later than a full queue does. Each step bounds only its own
  wait: when overload slows every step at once (a CPU host that also runs the clients), an accepted request
  waits in more than one queue, and its total wait can pass the budget (the live stack's 10x test prints it).
  A client's own ``timeout`` does not close that gap: the ensemble copies it unchanged to every step's request
  (core ensemble_scheduler.cc), and each step's queue starts its clock at its own enqueue (core
  scheduler_utils.cc, PolicyQueue::Enqueue). Only a share of the budget per step would bound the total.
- ``priority_levels: 2`` with ``default_priority_level: 2``: user requests land in level 2; health and
  readiness probes send priority 1 and overtake them in every step's queue (the ensemble passes a
  request's priority on to each step). Level 1 has its own queue of the same size and no timeout: a
  probe waits at most for the batch each step is running, and a probe rejected for a slow batch under
  overload would restart a server that is only busy.

In front of the steps, the deployed proxy bounds the ensemble as a whole: ``max_in_flight`` (:func:`in_flight_limit`,
recorded in the manifest) inference requests in progress, HTTP and gRPC together; the one above it is refused
before Triton reads a byte (429 with ``Retry-After``, RESOURCE_EXHAUSTED; deploy/proxy_admission.py). With at
most that many in the pipeline no step's queue fills, no request is refused by a later step after an earlier one
worked on it, and an accepted request's wait in all three queues together stays within the budget (issue 37).
``generator serve`` has no such front door: there the steps' queues alone shed.

``max_queue_size`` counts requests, not images: a client sending N images per request fills the queue
N times as fast, and the timeout, not the queue size, bounds its wait.

The budget itself is the user's SLA when ``--max-queue-ms`` is given. Without it the build derives one from
the measured service time: the batch running plus the two full batches its queue then holds, under load, never
less than ``MIN_BUDGET_MS``. A fixed default
(250 ms until issue 17) is shorter than one batch of a 640 model on a small CPU, so the default build shed
a burst of ``--max-batch`` requests that the machine answered within a second.
"""

from __future__ import annotations

import math

from generator.builder.spec.options import BuildOptions
from generator.repository.admission_record import Admission, LatencyBudget, QueuePolicy, ServiceTime

# Steps measured one after another vs the same steps sharing the machine's cores under overload.
CONTENTION_FACTOR = 2.0
# A derived budget: the batch running and two queued behind it, under load, and never below the floor (the old
# fixed default). With two (and a queue sized without the running batch) a default build timed out requests of
# six concurrent clients on an idle 2-core machine: an admitted request waited for more than the budget held.
DERIVED_BATCHES = 3
MIN_BUDGET_MS = 250.0


def derived_budget_ms(batch_ms: float | None) -> float:
    """``DERIVED_BATCHES`` full batches under load, rounded up to a whole millisecond, at least ``MIN_BUDGET_MS``."""
    if batch_ms is None:
        return MIN_BUDGET_MS
    return max(MIN_BUDGET_MS, float(math.ceil(DERIVED_BATCHES * CONTENTION_FACTOR * batch_ms)))


def latency_budget(max_queue_ms: float | None, batch_ms: float | None) -> LatencyBudget:
    """The budget every step's queue policy is sized from: ``--max-queue-ms`` as given, or derived."""
    if max_queue_ms is not None:
        return LatencyBudget(max_queue_ms, "explicit", "--max-queue-ms (the user's SLA)")
    if batch_ms is None:
        return LatencyBudget(MIN_BUDGET_MS, "derived", f"no service time known: the floor of {MIN_BUDGET_MS:g} ms")
    derived = derived_budget_ms(batch_ms)
    basis = (f"{DERIVED_BATCHES} full batches under load ({DERIVED_BATCHES} x {CONTENTION_FACTOR:g} x "
             f"{batch_ms:.1f} ms service time), at least {MIN_BUDGET_MS:g} ms")
    return LatencyBudget(derived, "derived", basis)


def queue_size(max_queue_ms: float, max_batch: int, batch_ms: float | None) -> int:
    """Requests a step may queue: what the pipeline serves in ``max_queue_ms`` less the batch running, at least one
    full batch.

    Without a service time (a config rendered on its own, e.g. for a golden file) two batches are assumed.
    """
    if batch_ms is None:
        return 2 * max_batch
    served = max_queue_ms / batch_ms * max_batch / CONTENTION_FACTOR - max_batch
    return max(max_batch, math.floor(served))


def in_flight_limit(max_queue_ms: float, max_batch: int, batch_ms: float | None) -> int:
    """Requests the whole pipeline may hold at once (queued or running, every step together) so that one admitted
    last still finishes within ``max_queue_ms``.

    Little's law: what is in flight is throughput x time in the system, and the pipeline's throughput under load is
    ``max_batch`` images per ``CONTENTION_FACTOR x batch_ms``. One batch less than that product leaves room for
    the batch a request admitted last waits behind in the last step. It comes to the same number as one step's
    queue (:func:`queue_size`): a step's queue bounds one step, this bounds the pipeline. The front door (the
    proxy's ``limit_conn``, deploy/proxy_admission.py) enforces it; Triton 2.51 has no such limit for an ensemble.
    """
    return queue_size(max_queue_ms, max_batch, batch_ms)


def queue_policy(max_queue_ms: float, max_batch: int, batch_ms: float | None) -> QueuePolicy:
    """The queue policy of every composing step for a budget of ``max_queue_ms``."""
    return QueuePolicy(timeout_us=round(max_queue_ms * 1000),
                       max_queue_size=queue_size(max_queue_ms, max_batch, batch_ms))


def build_admission(options: BuildOptions, service: ServiceTime | None) -> Admission:
    """The build's admission, worked out once: the budget (``--max-queue-ms``, or derived from the service time)
    and the policy it gives every step. The config rendering and the manifest both take this one object.

    ``service`` None (a config rendered on its own): ``--service-ms`` when given, else no service time.
    """
    if service is None and options.service_ms is not None:
        service = ServiceTime(options.max_batch, options.service_ms, "--service-ms")
    batch_ms = service.batch_ms if service is not None else None
    budget = latency_budget(options.max_queue_ms, batch_ms)
    return Admission(budget, queue_policy(budget.ms, options.max_batch, batch_ms), service,
                     in_flight_limit(budget.ms, options.max_batch, batch_ms))


def budget_warning(max_queue_ms: float, batch_ms: float) -> str | None:
    """Why the budget cannot be kept by fast rejections alone, or None."""
    if batch_ms * CONTENTION_FACTOR <= max_queue_ms:
        return None
    return (f"--max-queue-ms {max_queue_ms:g} is shorter than one full batch under load (about "
            f"{batch_ms * CONTENTION_FACTOR:.0f} ms): the queues still hold one batch, so requests that wait "
            "too long are rejected by timeout instead of at once; raise --max-queue-ms or lower --max-batch")
