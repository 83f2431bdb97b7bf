"""Steps where Triton's dynamic batcher can leave a queued request waiting after its instance is free.

Every composing step carries a queue policy (priority levels, a timeout, a queue size: admission.py), and in
Triton (core r24.10 = 2.51, unchanged on main) any of those turns the batcher's prefetching off
(``core:src/scheduler_utils.cc PriorityQueue::PriorityQueue``: ``support_prefetching_`` only without them). The
batcher then hands a batch over only while an instance waits for one (``core:src/rate_limiter.cc
PayloadSlotAvailable``: ``WaitingConsumerCount() > 0``), and when every instance is busy it sleeps on its condition
variable for up to 500 ms (``core:src/dynamic_batch_scheduler.cc WaitForPayloadSlotAvailable``,
``default_wait_microseconds``). The instance that finishes wakes it from ``Payload::Execute`` before its thread
is back in ``RateLimiter::DequeuePayload`` counting itself as waiting; the batcher, woken, still sees no waiting
instance and sleeps again. Nothing wakes it until another request arrives for that step, another instance
finishes, or the 500 ms pass, when requests past their timeout are rejected ("Request timeout expired").

Measured on the embedded Triton 2.51 (docs/PERFORMANCE.md, "A request left waiting behind a free instance"):
with one instance per Python step, 12 requests 6 at a time lost 5-7 of 240 requests to that 500 ms wait, and two
closed-loop streams waited 13-15 ms behind an idle preprocess or NMS instance in 8-9 % of requests. With a second
instance, the other's end wakes the batcher when the first is already waiting: under 0.5 % of such waits, and one
500 ms wait in 1,200 burst requests (both instances finishing at once). So the default build runs two instances of
every step (options.py ``instance_counts``) and says so when a step runs one.
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonclient.grpc import model_config_pb2 as mc

# core:src/dynamic_batch_scheduler.cc BatcherThread: how long the batcher sleeps when nothing wakes it.
BATCHER_SLEEP_MS = 500


def _prefetching_off(batching: mc.ModelDynamicBatching) -> bool:
    """core:src/scheduler_utils.cc PriorityQueue::PriorityQueue: prefetching is on only with one priority level
    and a default policy without a timeout, a timeout override or a queue size."""
    policy = batching.default_queue_policy
    return bool(batching.priority_levels or policy.default_timeout_microseconds
                or policy.allow_timeout_override or policy.max_queue_size)


def _instances(config: mc.ModelConfig) -> int:
    return sum(max(group.count, 1) for group in config.instance_group) or 1


def stranding_steps(configs: Mapping[str, mc.ModelConfig]) -> list[str]:
    """The dynamically batched models with one instance and a queue policy: where a request can wait for the
    next one to arrive (up to ``BATCHER_SLEEP_MS``) after the instance is free."""
    return sorted(name for name, config in configs.items()
                  if config.HasField("dynamic_batching") and _prefetching_off(config.dynamic_batching)
                  and _instances(config) == 1)


def stranding_warning(configs: Mapping[str, mc.ModelConfig]) -> str | None:
    """What a build with single-instance steps should say, or None."""
    steps = stranding_steps(configs)
    if not steps:
        return None
    return (f"{', '.join(steps)} {'runs' if len(steps) == 1 else 'run'} one instance: Triton's dynamic batcher "
            "with a queue policy can leave a request queued behind it waiting, after the instance is free, until "
            f"the next request arrives or {BATCHER_SLEEP_MS} ms pass (docs/OPERATING.md, \"Instances\"); give "
            "such a step two instances with --instances")
