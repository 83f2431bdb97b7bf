"""A Locust user facing a misconfigured stack names the cause and backs off (loadtest/failures.py)."""

from __future__ import annotations

import random

from tritonclient.utils import InferenceServerException

from loadtest.errors import InferenceFailed
from loadtest.failures import Backoff, named_failure


def test_backoff_doubles_to_its_cap_with_jitter_and_resets_on_an_answer():
    random.seed(29)
    backoff = Backoff(first_s=0.1, max_s=5.0)
    waits = [backoff.failed() for _ in range(10)]
    caps = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0, 5.0]
    assert all(cap / 2 <= wait <= cap for wait, cap in zip(waits, caps, strict=True))
    # What a user spends in 20 s against a stack that never answers: about ten attempts, not thousands.
    assert sum(caps[:9]) > 20 / 2
    backoff.reached()
    assert backoff.failed() <= 0.1


def test_the_cause_is_named_and_stable_so_locust_counts_it_in_one_row():
    tls = InferenceServerException("[StatusCode.UNAVAILABLE] failed to connect to all addresses; last error: "
                                   "UNKNOWN: ipv4:172.18.0.3:8444: Custom verification check failed with error: "
                                   "UNAUTHENTICATED: Hostname Verification Check failed.", "StatusCode.UNAVAILABLE")
    first, unreached = named_failure(tls, "pod:8444")
    again, _ = named_failure(InferenceServerException(str(tls).replace("172.18.0.3", "172.18.0.9")), "pod:8444")
    assert unreached and isinstance(first, InferenceFailed) and str(first) == str(again)
    assert "does not name pod" in str(first)
    refused, unreached = named_failure(ConnectionRefusedError(111, "Connection refused"), "triton:8444")
    assert unreached and str(refused) == "connection refused: nothing listens at triton:8444"


def test_a_server_answer_is_kept_and_an_empty_exception_is_never_reported_empty():
    shed = InferenceServerException("Exceeds maximum queue size", "StatusCode.UNAVAILABLE")
    kept, unreached = named_failure(shed, "h:1")
    assert not unreached and str(kept) == "[StatusCode.UNAVAILABLE] Exceeds maximum queue size"
    other = ValueError("response carries no num_detections output")
    assert named_failure(other, "h:1") == (other, False)  # its repr already holds its text
    empty, unreached = named_failure(InferenceServerException(""), "h:1")
    assert not unreached and str(empty) == "InferenceServerException without a message (status None)"


def test_a_grpc_error_keeps_its_text_in_locusts_failure_table():
    """tritonclient.grpc raises ``InferenceServerException(msg=..., status=...)``: its repr, which Locust's table
    keys on (``StatsError.parse_error``; Locust is not imported here: it patches the process with gevent), is a
    bare ``InferenceServerException()``; the failure reported carries the status and the text."""
    cancelled = InferenceServerException(msg="Locally cancelled by application!", status="StatusCode.CANCELLED")
    assert repr(cancelled) == "InferenceServerException()"
    reported, unreached = named_failure(cancelled, "h:1")
    assert not unreached and isinstance(reported, InferenceFailed)
    assert repr(reported) == "InferenceFailed('[StatusCode.CANCELLED] Locally cancelled by application!')"


def test_a_refusal_under_overload_is_named_by_its_cause_and_backs_off_for_its_retry_after() -> None:
    from loadtest.failures import BUSY_PAUSE_S, REFUSED_PREFIX, refusal

    proxy = refusal(InferenceServerException("server busy: ...; retry after 1 s", "StatusCode.RESOURCE_EXHAUSTED"))
    http = refusal(InferenceServerException("server busy: ...; retry after 1 s", "429"))
    queue = refusal(InferenceServerException("in ensemble 'yolo', Exceeds maximum queue size", "StatusCode.UNAVAILABLE"))
    assert proxy is not None and http is not None and queue is not None
    assert str(proxy[0]) == str(http[0]) == REFUSED_PREFIX + "the proxy's in-flight limit"
    assert str(queue[0]) == REFUSED_PREFIX + "a full Triton queue"
    budget = refusal(InferenceServerException("in ensemble 'yolo', Request timeout expired", "StatusCode.UNAVAILABLE"))
    assert budget is not None and str(budget[0]) == REFUSED_PREFIX + "Triton's queue budget"
    assert BUSY_PAUSE_S <= budget[1] <= 1.2 * BUSY_PAUSE_S
    assert 1.0 <= proxy[1] <= 1.2 and BUSY_PAUSE_S <= queue[1] <= 1.2 * BUSY_PAUSE_S
    # A server going away, or a bad request, is an error as before.
    assert refusal(InferenceServerException("Socket closed", "StatusCode.UNAVAILABLE")) is None
    assert refusal(InferenceServerException("bad image", "400")) is None
