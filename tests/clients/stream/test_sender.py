"""The sender's policy with requests that take scripted times: newest frame first, bounded, answers in order.

The detection call is the network boundary; here it is a coroutine that answers after a given delay, so the
policy can be checked without a server (tests/integration/test_streams.py runs it against the real one).
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from clients.detection import DetectionResult
from clients.errors import ServerBusyError, ServerUnavailableError
from clients.stream.frame import Frame
from clients.stream.sender import Answer, Sender
from clients.stream.slot import LatestSlot
from clients.stream.stats import StreamStats

EMPTY = DetectionResult(detections=())


def frame(index: int) -> Frame:
    return Frame(index, time.monotonic(), time.time(), None, jpeg=f"jpeg {index}".encode())


async def feed(slot: LatestSlot[Frame], stats: StreamStats, sender: Sender, count: int, every_s: float) -> None:
    for index in range(count):
        stats.add(read=1, dropped=slot.put(frame(index)))
        sender.wake()
        await asyncio.sleep(every_s)


def run(delays: dict[int, float], count: int, every_s: float, in_flight: int, fail: frozenset[int] = frozenset(),
        busy_after: dict[int, float] | None = None):
    async def main() -> tuple[list[Answer], list[int], StreamStats, int]:
        slot: LatestSlot[Frame] = LatestSlot(1)
        stats = StreamStats("cam")
        answers: list[Answer] = []
        sent: list[int] = []
        busy = 0
        most = 0

        async def detect(data: bytes) -> DetectionResult:
            nonlocal busy, most
            index = int(data.split()[1])
            sent.append(index)
            busy += 1
            most = max(most, busy)
            await asyncio.sleep(delays.get(index, 0.001))
            busy -= 1
            if index in fail:
                raise ServerUnavailableError("overloaded")
            if busy_after and index in busy_after:
                raise ServerBusyError("server busy", retry_after_s=busy_after[index])
            return EMPTY

        done = False
        sender = Sender("cam", slot, stats, detect, answers.append, in_flight=in_flight)
        task = asyncio.create_task(sender.run(lambda: done))
        await feed(slot, stats, sender, count, every_s)
        done = True
        sender.wake()
        await asyncio.wait_for(task, 5)
        return answers, sent, stats, most

    return asyncio.run(main())


def test_a_slow_answer_makes_the_waiting_frames_drop_and_the_newest_goes_next():
    answers, sent, stats, most = run({0: 0.25}, count=6, every_s=0.05, in_flight=1)
    assert most == 1
    assert sent[0] == 0 and sent[1] >= 4, f"frames that came while frame 0 was out are dropped: {sent}"
    summary = stats.summary()
    assert summary["read"] == summary["sent"] + summary["dropped"] + summary["left"] and summary["dropped"] >= 3
    assert summary["answered"] == len(answers) == len(sent)


def test_answers_of_several_requests_in_flight_leave_in_frame_order():
    # frame 0 is slow, 1 and 2 come back first: they wait for it
    answers, sent, stats, most = run({0: 0.3, 1: 0.05, 2: 0.01}, count=3, every_s=0.01, in_flight=3)
    assert most == 3 and sent == [0, 1, 2]
    assert [a.frame.index for a in answers] == [0, 1, 2]
    assert stats.summary()["dropped"] == 0


def test_a_failed_request_is_counted_and_the_stream_goes_on():
    answers, sent, stats, _ = run({}, count=5, every_s=0.02, in_flight=1, fail=frozenset({1}))
    summary = stats.summary()
    assert summary["failed"] == 1 and summary["answered"] == len(answers) == len(sent) - 1
    assert [a.frame.index for a in answers] == [i for i in sent if i != 1]
    assert "overloaded" in (summary["last_error"] or "")


def test_frames_from_a_decoder_are_jpeg_encoded_once_before_sending():
    async def main() -> bytes:
        slot: LatestSlot[Frame] = LatestSlot(1)
        got: list[bytes] = []

        async def detect(data: bytes) -> DetectionResult:
            got.append(data)
            return EMPTY

        sender = Sender("cam", slot, StreamStats("cam"), detect, lambda a: None, jpeg_quality=80)
        image = np.zeros((32, 48, 3), dtype=np.uint8)
        slot.put(Frame(0, time.monotonic(), time.time(), None, image=image))
        finished = asyncio.create_task(sender.run(lambda: True))
        await asyncio.wait_for(finished, 5)
        return got[0]

    data = main_result = asyncio.run(main())
    assert data[:2] == b"\xff\xd8" and main_result == data


def test_in_flight_must_be_positive():
    with pytest.raises(Exception, match="at least 1"):
        Sender("cam", LatestSlot(1), StreamStats("cam"), None, lambda a: None, in_flight=0)  # type: ignore[arg-type]


def test_a_refusal_is_counted_apart_and_the_stream_backs_off_for_the_retry_after():
    answers, sent, stats, _ = run({}, count=12, every_s=0.02, in_flight=1, busy_after={1: 0.1})
    summary = stats.summary()
    assert (summary["refused"], summary["failed"]) == (1, 0)
    assert summary["answered"] == len(answers) == len(sent) - 1
    # The 0.1 s after frame 1's refusal sent nothing: the frames meanwhile were replaced by newer ones.
    after = sent[sent.index(1) + 1]
    assert after >= 1 + 4 and summary["dropped"] >= 3, sent
