"""Small load generators for the overload tests: open loop at a fixed rate, closed loop, one by one.

Requests go out through tritonclient's gRPC ``async_infer`` (a gRPC future per request, completed on
gRPC's own thread), so one Python process can offer several hundred requests a second without the
sender's pace depending on how fast the server answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from clients.request import image_request


@dataclass(frozen=True)
class Outcome:
    sent_s: float  # since the start of the run
    latency_ms: float
    status: str  # "OK" or the gRPC status, e.g. "StatusCode.UNAVAILABLE"
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "OK"


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


class Sender:
    """One gRPC client sending the same encoded image to one model."""

    def __init__(self, url: str, model: str, image: bytes, **tls: Any) -> None:
        """``tls``: tritonclient's ``ssl``/``root_certificates``, for a server behind the deployment's TLS proxy."""
        self.client = grpcclient.InferenceServerClient(url, **tls)
        self.model = model
        self.inputs, self.outputs = image_request(grpcclient, [image])
        self._lock = threading.Lock()
        self.last_sent = 0.0  # perf_counter() of the latest request sent

    def close(self) -> None:
        self.client.close()

    def _send(self, start: float, priority: int, results: list[Outcome], done: threading.Semaphore) -> None:
        sent = self.last_sent = time.perf_counter()

        def finished(result: Any, error: Any) -> None:
            latency = (time.perf_counter() - sent) * 1000
            outcome = (Outcome(sent - start, latency, "OK") if error is None
                       else Outcome(sent - start, latency, str(error.status()), error.message()))
            with self._lock:
                results.append(outcome)
            done.release()

        self.client.async_infer(self.model, self.inputs, finished, outputs=self.outputs, priority=priority,
                                client_timeout=60)

    def open_loop(self, rate: float, duration_s: float, priority: int = 0) -> list[Outcome]:
        """Send ``rate`` requests a second for ``duration_s`` whatever the answers; wait for every answer."""
        results: list[Outcome] = []
        done = threading.Semaphore(0)
        start, sent = time.perf_counter(), 0
        while (now := time.perf_counter() - start) < duration_s:
            due = sent / rate
            if due > now:
                time.sleep(due - now)
            self._send(start, priority, results, done)
            sent += 1
        for _ in range(sent):
            done.acquire()
        return results

    def closed_loop(self, concurrency: int, duration_s: float, priority: int = 0) -> list[Outcome]:
        """``concurrency`` requests always in flight for ``duration_s``."""
        results: list[Outcome] = []
        done = threading.Semaphore(0)
        start, sent = time.perf_counter(), 0
        for _ in range(concurrency):
            self._send(start, priority, results, done)
            sent += 1
        while time.perf_counter() - start < duration_s:
            done.acquire()
            self._send(start, priority, results, done)
            sent += 1
        for _ in range(concurrency):
            done.acquire()
        return results

    def burst(self, count: int, priority: int = 0) -> list[Outcome]:
        """``count`` requests sent at once, none after them; wait for every answer."""
        return self.closed_loop(count, 0.0, priority)

    def live_ms(self) -> float:
        """Round trip of the server's cheapest call: how responsive the machine is at the moment."""
        start = time.perf_counter()
        self.client.is_server_live()
        return (time.perf_counter() - start) * 1000

    def one_by_one(self, count: int, priority: int = 0, pause_s: float = 0.0) -> list[Outcome]:
        results: list[Outcome] = []
        done = threading.Semaphore(0)
        start = time.perf_counter()
        for _ in range(count):
            self._send(start, priority, results, done)
            done.acquire()
            time.sleep(pause_s)
        return results
