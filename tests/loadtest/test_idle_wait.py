"""Idle waits from trace timestamps: only the part of a queue wait during which an instance was free counts."""

from __future__ import annotations

import pytest

from loadtest.idle_wait import idle_waits, summary
from loadtest.trace_steps import Trace

MS = 1_000_000


def request(step: str, queued: int, start: int, end: int) -> Trace:
    stamps = {"REQUEST_START": queued * MS, "COMPUTE_START": start * MS, "COMPUTE_END": end * MS}
    return Trace(model="ens", children=[Trace(model=step, stamps=stamps)])


def test_a_wait_behind_the_busy_only_instance_is_not_idle() -> None:
    tops = [request("pre", 0, 0, 10), request("pre", 2, 10, 20)]
    assert idle_waits(tops, {"pre": 1})["pre"] == [0.0, 0.0]


def test_a_wait_after_the_only_instance_finished_is_idle() -> None:
    # Queued at 2 behind the batch ending at 10, handed over only at 510: 500 ms stranded.
    tops = [request("pre", 0, 0, 10), request("pre", 2, 510, 520)]
    assert idle_waits(tops, {"pre": 1})["pre"] == [0.0, pytest.approx(500.0)]


def test_with_two_instances_one_busy_instance_leaves_the_other_idle() -> None:
    tops = [request("det", 0, 0, 30), request("det", 5, 20, 40)]
    assert idle_waits(tops, {"det": 2})["det"] == [0.0, pytest.approx(15.0)]
    assert idle_waits(tops, {"det": 1})["det"] == [0.0, 0.0]  # one instance: it was busy until 30, then ran it


def test_steps_not_asked_for_are_left_out_and_the_summary_counts_long_waits() -> None:
    tops = [request("pre", 0, 0, 10), request("pre", 2, 30, 40), request("nms", 0, 1, 2)]
    waits = idle_waits(tops, {"pre": 1})
    assert set(waits) == {"pre"}
    assert summary(waits["pre"]) == {"requests": 2, "over": 1, "share_over": 0.5, "mean_over_ms": 20.0,
                                     "max_ms": 20.0, "full_sleeps": 0}
    assert summary([0.1, 500.2, 450.0, 12.0])["full_sleeps"] == 2
