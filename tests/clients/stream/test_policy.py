"""The pure parts of a stream: latest-frame-wins, frame order, back-off, pacing and the summary maths."""

from __future__ import annotations

import itertools
import random
import threading

import pytest

from clients.stream.backoff import Backoff
from clients.stream.ordering import InOrder
from clients.stream.pacing import FrameClock, Sampler, next_frame
from clients.stream.slot import LatestSlot
from clients.stream.stats import RESERVOIR, StreamStats, quantile, totals


def test_a_full_slot_pushes_out_the_oldest_frame_and_counts_it():
    slot: LatestSlot[int] = LatestSlot(1)
    assert slot.put(1) == 0
    assert slot.put(2) == 1 and slot.put(3) == 1
    assert slot.take() == 3 and slot.take() is None
    assert slot.dropped == 2


def test_taking_gives_the_newest_frame_and_drops_the_older_waiting_ones():
    slot: LatestSlot[int] = LatestSlot(3)
    for frame in range(5):
        slot.put(frame)
    assert len(slot) == 3 and slot.dropped == 2  # 0 and 1 pushed out
    assert slot.take() == 4
    assert slot.dropped == 4 and len(slot) == 0  # 2 and 3 were stale when the sender came
    slot.put(5)
    assert slot.discard() == 1 and slot.dropped == 5


def test_the_slot_stays_bounded_under_a_fast_producer_thread():
    slot: LatestSlot[int] = LatestSlot(2)
    taken: list[int] = []

    def produce() -> None:
        for frame in range(20_000):
            slot.put(frame)

    producer = threading.Thread(target=produce)
    producer.start()
    while producer.is_alive():
        item = slot.take()
        if item is not None:
            taken.append(item)
        assert len(slot) <= 2
    producer.join()
    rest = slot.take()
    taken += [rest] if rest is not None else []
    assert taken == sorted(taken) and taken[-1] == 19_999
    assert len(taken) + slot.dropped == 20_000, "every frame is either taken or counted as dropped"


def test_a_slot_needs_room_for_one_frame():
    with pytest.raises(ValueError, match="at least one frame"):
        LatestSlot(0)


def test_answers_leave_in_frame_order_and_failures_do_not_block_them():
    order: InOrder[str] = InOrder()
    assert order.done(1, "b") == []  # waits for 0
    assert order.done(2, None) == []  # failed, still behind 0
    assert order.pending == 2
    assert order.done(0, "a") == ["a", "b"]
    assert order.done(3, "d") == ["d"]
    with pytest.raises(ValueError, match="already completed"):
        order.done(3, "again")


def test_backoff_grows_to_its_cap_with_jitter_and_starts_over_after_a_reset():
    backoff = Backoff(initial_s=0.5, max_s=4.0, jitter=0.2, rng=random.Random(1))
    pauses = [backoff.next() for _ in range(6)]
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(0.8 * c <= p <= c for p, c in zip(pauses, ceilings, strict=True)), pauses
    backoff.reset()
    assert 0.4 <= backoff.next() <= 0.5
    with pytest.raises(ValueError):
        Backoff(initial_s=0)


def test_a_camera_with_one_request_in_flight_sends_the_newest_frame_and_drops_the_rest():
    clock = FrameClock(fps=5, start=100.0)  # frames due at 100.0, 100.2, 100.4, ...
    assert next_frame(clock, -1, 99.0) == (0, 0, pytest.approx(1.0))  # before the first frame: wait for it
    assert next_frame(clock, -1, 100.05) == (0, 0, 0.0)
    # frame 0's request took 0.1 s: frame 1 is not due yet, wait 0.05 s
    assert next_frame(clock, 0, 100.15) == (1, 0, pytest.approx(0.05))
    # frame 1's request took 0.75 s (until 100.95): frames 2, 3 came due and are dropped, 4 goes now
    assert next_frame(clock, 1, 100.95) == (4, 2, 0.0)
    assert clock.latest(100.2) == 1 and clock.latest(99.9) == -1


def test_sampling_keeps_evenly_spaced_frames_without_a_burst_after_a_gap():
    sampler = Sampler(5.0)  # from a 25 frames/s source: every fifth frame
    kept = [t for t in (i / 25 for i in range(50)) if sampler.keep(t)]
    assert len(kept) == 10 and kept[0] == 0.0
    assert all(abs((b - a) - 0.2) < 1e-9 for a, b in itertools.pairwise(kept))
    sampler = Sampler(5.0)
    assert sampler.keep(0.0) and sampler.keep(3.0)  # a 3 s gap: the next frame is kept ...
    assert not sampler.keep(3.04) and not sampler.keep(3.1)  # ... and the pace is 5/s from there, no catch-up
    assert sampler.keep(3.2)
    assert all(Sampler(None).keep(t) for t in (0.0, 0.0, 0.001))


def test_quantiles_interpolate_between_samples():
    values = sorted(float(v) for v in range(1, 101))  # 1..100
    assert quantile(values, 0.5) == pytest.approx(50.5)
    assert quantile(values, 0.95) == pytest.approx(95.05)
    assert quantile([7.0], 0.95) == 7.0 and quantile([], 0.5) is None


def test_the_summary_counts_and_rates_of_a_stream():
    stats = StreamStats("cam")
    stats.add(read=10, sent=8, dropped=2)
    for ms in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0):
        stats.latency(ms)
    stats.add(failed=1)
    summary = stats.summary()
    assert summary["answered"] == 7 and summary["drop_rate"] == 0.2
    assert summary["p50_ms"] == 40.0 and summary["p95_ms"] == pytest.approx(67.0)
    stats.reset()
    assert stats.summary()["answered"] == 0 and stats.summary()["p95_ms"] is None


def test_the_latency_reservoir_stays_bounded_and_representative():
    stats = StreamStats("long")
    for i in range(RESERVOIR * 3):
        stats.latency(float(i % 100))
    summary = stats.summary()
    assert len(stats._latencies_ms) == RESERVOIR and summary["answered"] == RESERVOIR * 3
    assert summary["p50_ms"] == pytest.approx(49.5, abs=2.0)


def test_totals_take_the_worst_stream():
    a = StreamStats("a")
    a.add(read=10, dropped=1)
    a.latency(20.0)
    b = StreamStats("b")
    b.add(read=10, dropped=5)
    b.latency(90.0)
    total = totals([a.summary(), b.summary()])
    assert total["streams"] == 2 and total["read"] == 20 and total["drop_rate"] == 0.3
    assert total["worst_drop_rate"] == 0.5 and total["worst_p95_ms"] == 90.0
