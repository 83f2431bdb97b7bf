"""Closed-loop load from Python threads: each thread owns a tritonclient client and sends back to back.

Requests are built by ``clients.request.image_request`` (the one request builder of the project), so the
bench and the soak send exactly what the detection clients send.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clients.request import image_request
from generator.serving.contract import NUM_DETECTIONS

from .errors import LoadTestError, RunError

Infer = Callable[[bytes], Any]


def client_factory(protocol: str, url: str, model: str, timeout_s: float) -> Callable[[], Infer]:
    """A function that makes one client (call it once per thread) and returns its ``infer(image) -> result``.

    ``infer`` raises tritonclient's ``InferenceServerException`` when the server refuses the request, and
    ``RunError`` when a response comes back without ``num_detections``.
    """
    if protocol not in ("grpc", "http"):
        raise LoadTestError(f"unknown protocol {protocol!r}: use grpc or http")

    def make() -> Infer:
        if protocol == "grpc":
            import tritonclient.grpc as module

            client: Any = module.InferenceServerClient(url)
            options: dict[str, Any] = {"client_timeout": timeout_s}
        else:
            import tritonclient.http as module

            client = module.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
            options = {}

        def infer(image: bytes) -> Any:
            inputs, outputs = image_request(module, [image])
            result = client.infer(model, inputs, outputs=outputs, **options)
            if result.as_numpy(NUM_DETECTIONS) is None:
                raise RunError(f"response without {NUM_DETECTIONS}")
            return result

        return infer

    return make


@dataclass
class LoopResult:
    """What a closed loop measured: latencies of successes (ms), failures, seconds, distinct error texts."""

    latencies_ms: list[float] = field(default_factory=list)
    failures: int = 0
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def success(self, elapsed_ms: float) -> None:
        with self._lock:
            self.latencies_ms.append(elapsed_ms)

    def failure(self, error: Exception, warmup: bool = False) -> None:
        with self._lock:
            self.failures += 0 if warmup else 1
            text = f"warm-up: {error}" if warmup else str(error)
            if len(self.errors) < 5 and text not in self.errors:
                self.errors.append(text)


def closed_loop(make_client: Callable[[], Infer], images: list[bytes], concurrency: int, duration_s: float,
                warmup_requests: int, on_start: Callable[[], None] | None = None) -> LoopResult:
    """``concurrency`` threads, each with its own client, send back to back for ``duration_s``.

    Warm-up requests happen before the clock starts; ``on_start`` runs once everyone is warm (e.g. a metrics
    scrape), so a window counts only its own requests.
    """
    result = LoopResult()
    ready = threading.Barrier(concurrency + 1)
    deadline = [float("inf")]

    def worker(index: int) -> None:
        try:
            infer = make_client()
            for i in range(warmup_requests):
                infer(images[(index + i) % len(images)])
        except Exception as exc:  # noqa: BLE001 -- reported in the result; the barrier must still be reached
            result.failure(exc, warmup=True)
            ready.wait()
            return
        ready.wait()
        i = index
        while time.perf_counter() < deadline[0]:
            start = time.perf_counter()
            try:
                infer(images[i % len(images)])
                result.success((time.perf_counter() - start) * 1000.0)
            except Exception as exc:  # noqa: BLE001 -- a failed request is a data point
                result.failure(exc)
            i += 1

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    while ready.n_waiting < concurrency and any(t.is_alive() for t in threads):
        time.sleep(0.01)
    if on_start is not None:
        on_start()
    begin = time.perf_counter()
    deadline[0] = begin + duration_s  # set just before releasing the warm threads
    ready.wait()
    for thread in threads:
        thread.join()
    result.elapsed_s = time.perf_counter() - begin
    return result
