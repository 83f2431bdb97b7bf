"""Which configs let Triton's batcher strand a queued request: read from the config fields core reads."""

from __future__ import annotations

import pytest

from generator.builder.stages.config.load_rules import parse
from generator.builder.stages.config.stranding import stranding_steps, stranding_warning

POLICY = """
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 450000 max_queue_size: 8 }"""


def step(count: int, batching: str) -> str:
    return (f'name: "s" backend: "python" max_batch_size: 4 instance_group [ {{ count: {count} kind: KIND_CPU }} ]'
            f"{batching}")


@pytest.mark.parametrize(("text", "strands"), [
    (step(1, "dynamic_batching {" + POLICY + " }"), True),
    (step(1, "dynamic_batching { priority_levels: 2 default_priority_level: 2 }"), True),
    (step(1, "dynamic_batching { default_queue_policy { max_queue_size: 8 } }"), True),
    (step(1, "dynamic_batching { default_queue_policy { allow_timeout_override: true } }"), True),
    # Without a policy the batcher prefetches: it never waits for an instance to count itself as waiting.
    (step(1, "dynamic_batching { max_queue_delay_microseconds: 100 }"), False),
    (step(2, "dynamic_batching {" + POLICY + " }"), False),
    (step(1, ""), False),  # no dynamic batcher at all
])
def test_a_single_instance_behind_a_queue_policy_strands(text: str, strands: bool) -> None:
    assert stranding_steps({"s": parse("s", text)}) == (["s"] if strands else [])


def test_the_warning_names_every_such_step_and_the_remedy() -> None:
    configs = {name: parse(name, step(1, "dynamic_batching {" + POLICY + " }")) for name in ("b_nms", "a_pre")}
    warning = stranding_warning(configs)
    assert warning is not None and warning.startswith("a_pre, b_nms run one instance")
    assert stranding_warning({"s": parse("s", step(2, "dynamic_batching {" + POLICY + " }"))}) is None
