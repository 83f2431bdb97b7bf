"""Fault injection against real embedded Triton servers: what heals, what drains, what is retried.

- a killed Python-backend stub (each step) under load: the watchdog of `generator serve` restarts Triton;
- a killed tritonserver: restarted, and the same client objects reconnect through their retries;
- SIGTERM in the middle of a burst: every request gets a result or a clean error, none hangs;
- a step that hangs: the client's deadline ends the call on time, and the probe reports it;
- overload (`--max-queue-size 1`): fast UNAVAILABLE, absorbed by retries; a bad image is never retried.

The measured times are printed (``pytest -m faults -s``); the README quotes them, measured with serve's own
watchdog defaults (``TDE_FAULTS_SERVE_DEFAULTS=1``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from clients import (
    NO_RETRY,
    AsyncDetectionClient,
    ClientError,
    ClientTimeoutError,
    DetectionClient,
    InferenceError,
    ModelInfo,
    RetryPolicy,
    ServerUnavailableError,
)
from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.server import watchdog
from generator.server.embedded import EmbeddedServer
from generator.server.hardening import admin_access
from generator.server.ports import free_port
from generator.synthetic import encode, make_scene
from tests.integration.helpers import metric, metric_delta
from tests.integration.serve_process import ServeProcess

pytestmark = [pytest.mark.integration, pytest.mark.faults]

KEY = "faults-admin-key-0123456789"
INFO = ModelInfo("yolo", 8, ())  # shipped with the client: no config call, so nothing but inference is timed
DEADLINE_S = 5.0
# CI watches closely to stay short; TDE_FAULTS_SERVE_DEFAULTS=1 measures serve's defaults (the numbers in docs/OPERATING.md).
HEALING_FLAGS = () if os.environ.get("TDE_FAULTS_SERVE_DEFAULTS") else (
    "--probe-interval-s", "0.5", "--probe-failures", "2", "--probe-timeout-s", "3", "--restart-grace-s", "2",
    "--drain-timeout-s", "10")
RECONNECT = RetryPolicy(attempts=200, initial_backoff_s=0.05, max_backoff_s=0.5)


@pytest.fixture(scope="module")
def image() -> bytes:
    return encode(make_scene(np.random.default_rng(5), 640, 480).image, ".jpg")


@pytest.fixture(scope="module")
def healing(demo_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    serve = ServeProcess([demo_repository], *HEALING_FLAGS, env={"TRITON_ADMIN_TOKEN": KEY},
                         log_file=tmp_path_factory.mktemp("faults") / "serve.log")
    try:
        serve.wait_for(r"^Triton 2\.51\.0 ready")
        yield serve
    finally:
        serve.stop()


@dataclass
class Outcome:
    start: float
    end: float
    error: ClientError | None


class Load:
    """Client threads sending one image after another (no retries, so every failure is seen)."""

    def __init__(self, urls: list[str], image: bytes) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(url, image)) for url in urls]
        for thread in self._threads:
            thread.start()

    def _loop(self, url: str, image: bytes) -> None:
        with DetectionClient(url, timeout_s=DEADLINE_S, retry=NO_RETRY, model_info=INFO) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    client.detect(image)
                    error = None
                except ClientError as exc:  # anything else fails the thread, and the test below
                    error = exc
                self.outcomes.append(Outcome(start, time.monotonic(), error))
                if error is not None:
                    time.sleep(0.05)

    def back_after(self, moment: float) -> float | None:
        """Seconds from `moment` to the first success after the last failure, once three successes follow."""
        later = [o for o in self.outcomes if o.start >= moment]
        failed = [i for i, o in enumerate(later) if o.error is not None]
        tail = later[failed[-1] + 1 :] if failed else later
        return tail[0].end - moment if len(tail) >= 3 else None

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for thread in self._threads:
            thread.join(DEADLINE_S + 10)
        assert not any(t.is_alive() for t in self._threads)
        return self.outcomes


def wait(condition: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def all_restarts(serve: ServeProcess) -> float:
    return sum(v for k, v in serve.watchdog_metrics().items() if k.startswith("triton_watchdog_restarts_total"))


def assert_clean(outcomes: list[Outcome]) -> None:
    """Every request ended with a result or one of our errors, and none outlived its deadline."""
    longest = max(o.end - o.start for o in outcomes)
    assert longest < DEADLINE_S + 1.0, f"a request took {longest:.1f} s with a {DEADLINE_S} s deadline"


@pytest.mark.parametrize("step", ["preprocess", "detector", "nms"])
def test_killed_stub_under_load_is_healed(healing: ServeProcess, image: bytes, step: str) -> None:
    load = Load([f"grpc://{healing.grpc_url}", f"http://{healing.http_url}"], image)
    try:
        wait(lambda: sum(o.error is None for o in load.outcomes) >= 4, 60)
        (stub,) = healing.stubs(f"yolo_{step}_0_0")
        mark, counted = len(healing.lines), all_restarts(healing)
        killed = time.monotonic()
        stub.kill()
        healing.wait_for(r"^Triton restarted \(start \d+\) and serving again\.$", 90, after=mark)
        wait(lambda: load.back_after(killed) is not None, 60)
    finally:
        outcomes = load.stop()
    # The watchdog's metrics endpoint counted one restart. Its reason is whichever check saw the loss first: the
    # stub's exit, a probe meeting the dead stub, or Triton itself exiting when the stub died mid-request.
    assert all_restarts(healing) == counted + 1
    back = load.back_after(killed)
    failed = [o for o in outcomes if o.error is not None]
    print(f"\n{step} stub killed: serving again after {back:.1f} s; {len(failed)} requests failed meanwhile")
    assert failed, "killing a stub should fail some requests until the restart"
    assert back is not None and back < 45
    assert_clean(outcomes)


def test_killed_server_is_restarted_and_clients_reconnect(healing: ServeProcess, image: bytes) -> None:
    urls = [f"grpc://{healing.grpc_url}", f"http://{healing.http_url}"]
    served_once, killed = threading.Barrier(len(urls) + 1), threading.Event()

    def before_and_after(url: str) -> tuple[int, int]:
        """One client object (the HTTP one is gevent-based: it stays in its thread) across the restart."""
        with DetectionClient(url, timeout_s=60, retry=RECONNECT, model_info=INFO) as client:
            before = len(client.detect(image))
            served_once.wait(60)
            killed.wait(60)
            return before, len(client.detect(image))

    restarts_before = all_restarts(healing)
    with ThreadPoolExecutor(len(urls)) as pool:
        answers = [pool.submit(before_and_after, url) for url in urls]
        served_once.wait(60)
        mark = len(healing.lines)
        start = time.monotonic()
        healing.triton().kill()
        killed.set()
        counts = [answer.result() for answer in answers]
    elapsed = time.monotonic() - start
    healing.wait_for(r"^Triton restarted", 10, after=mark)
    # Counted under the check that saw it first: the exit, a vanished stub, or a probe meeting a dead port.
    assert all_restarts(healing) >= restarts_before + 1
    print(f"\ntritonserver killed: both clients answered again after {elapsed:.1f} s")
    assert all(before == after > 0 for before, after in counts)


def test_sigterm_mid_burst_drains(demo_repository: Path, tmp_path: Path) -> None:
    """Triton 2.51 first waits for open HTTP connections (the model schedulers still run), then stops the
    schedulers: an ensemble request between two steps at that moment gets UNAVAILABLE "Server is stopping",
    which the clients retry (elsewhere, or after a restart). No request may go unanswered or hang."""
    serve = ServeProcess([demo_repository], *HEALING_FLAGS, env={"TRITON_ADMIN_TOKEN": KEY},
                         log_file=tmp_path / "serve.log")
    serve.wait_for(r"^Triton 2\.51\.0 ready")
    urls = [f"grpc://{serve.grpc_url}", f"http://{serve.http_url}"]
    outcomes: list[tuple[str, Outcome]] = []
    image = encode(make_scene(np.random.default_rng(6), 1920, 1080).image, ".png")  # slow enough to be in flight

    def one(i: int) -> None:
        url = urls[i % 2]
        with DetectionClient(url, timeout_s=DEADLINE_S, retry=NO_RETRY, model_info=INFO) as client:
            start = time.monotonic()
            try:
                client.detect(image)
                error = None
            except ClientError as exc:
                error = exc
            outcomes.append((url, Outcome(start, time.monotonic(), error)))

    with ThreadPoolExecutor(16) as pool:
        for i in range(48):
            pool.submit(one, i)
            time.sleep(0.02)
            if i == 24:
                signalled = time.monotonic()
                serve.process.send_signal(signal.SIGTERM)
    assert serve.process.wait(60) == 0  # one SIGTERM: a second one would kill at once
    stopped = time.monotonic() - signalled
    serve.stop()
    assert serve.lines[-1] == "Triton stopped (exit code 0)."
    assert len(outcomes) == 48
    assert_clean([o for _, o in outcomes])
    errors = [o.error for _, o in outcomes if o.error is not None]
    assert all(isinstance(e, ServerUnavailableError) for e in errors), errors  # clean and retryable
    in_flight = [(url, o) for url, o in outcomes if o.start < signalled < o.end]
    assert in_flight, "the burst should have had requests in flight when SIGTERM came"
    early_http = [o for url, o in outcomes if url.startswith("http") and o.start < signalled - 0.3]
    assert early_http and all(o.error is None for o in early_http), "HTTP requests in flight must finish"
    print(f"\nSIGTERM mid-burst: serve exited 0 after {stopped:.1f} s; {len(in_flight)} requests in flight, "
          f"{sum(o.error is None for _, o in in_flight)} answered; {len(errors)} of 48 refused with UNAVAILABLE "
          f"({sorted({str(e).split(': ')[-1][:50] for e in errors})})")


# --- a hanging step and overload: one server without a watchdog ----------------------------------------------

HANG_S = 3.0
HANG_MODEL = '''
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Test-only: answers empty detections, HANG_S seconds late."""

    def execute(self, requests):
        time.sleep({hang_s})
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().shape[0]
            tensors = [("num_detections", np.zeros((n, 1), np.int32)), ("detection_boxes", np.zeros((n, 4, 4), np.float32)),
                       ("detection_scores", np.zeros((n, 4), np.float32)), ("detection_classes", np.zeros((n, 4), np.int32))]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(k, v) for k, v in tensors]))
        return responses
'''
HANG_CONFIG = '''
name: "hang"
backend: "python"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "num_detections" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "detection_boxes" data_type: TYPE_FP32 dims: [ 4, 4 ] },
  { name: "detection_scores" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "detection_classes" data_type: TYPE_INT32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


@pytest.fixture(scope="module")
def fragile(demo_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """`hang` (a Python model that sleeps) and `yolo_q1` (the demo with queues of one request per step).

    A budget of 5 s for batches said to take 20 s sizes every queue to its floor, one batch of one image; user
    traffic waits at priority level 2, the watchdog's probe at 1 (generator.builder.stages.admission).
    """
    root = tmp_path_factory.mktemp("fragile")
    build_repository(demo_onnx, root / "q1", BuildOptions(name="yolo_q1", max_batch=1, max_queue_ms=5000,
                                                         service_ms=20_000))
    for step in ("preprocess", "detector", "nms"):
        config = (root / "q1" / f"yolo_q1_{step}" / "config.pbtxt").read_text()
        assert "max_queue_size: 1\n" in config and "priority_levels: 2" in config
    (root / "hang" / "hang" / "1").mkdir(parents=True)
    (root / "hang" / "hang" / "config.pbtxt").write_text(HANG_CONFIG)
    (root / "hang" / "hang" / "1" / "model.py").write_text(HANG_MODEL.format(hang_s=HANG_S))
    server = EmbeddedServer(root / "q1", free_port(), free_port(), free_port(), log_file=root / "triton.log",
                            extra_args=(f"--model-repository={root / 'hang'}",), admin=admin_access({}),
                            exit_timeout_s=2)  # sleeping `hang` requests are not worth waiting for at the end
    with server:
        yield server


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_hanging_step_ends_at_the_client_deadline(fragile: EmbeddedServer, image: bytes, mode: str,
                                                  protocol: str) -> None:
    url = f"{protocol}://{fragile.grpc_url if protocol == 'grpc' else fragile.http_url}"
    kwargs: dict[str, Any] = {"model": "hang", "timeout_s": 1.0, "retry": RECONNECT}  # patient retries: a timeout is not retried
    start = time.monotonic()
    with pytest.raises(ClientTimeoutError, match="within 1 s"):
        if mode == "sync":
            with DetectionClient(url, **kwargs) as client:
                client.model_info  # noqa: B018 - the metadata call must not eat into the measured call
                start = time.monotonic()
                client.detect(image)
        else:

            async def go() -> None:
                nonlocal start
                async with AsyncDetectionClient(url, **kwargs) as client:
                    await client.model_info()
                    start = time.monotonic()
                    await client.detect(image)

            asyncio.run(go())
    elapsed = time.monotonic() - start
    print(f"\nhanging step, {mode} {protocol}: ClientTimeoutError after {elapsed:.2f} s (deadline 1 s)")
    assert 0.9 < elapsed < 1.8


def test_probe_reports_a_hanging_step(fragile: EmbeddedServer, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    assert watchdog.main(["probe", "--url", fragile.http_url, "--model", "hang", "--timeout-s", "1"]) == 1
    assert time.monotonic() - start < 2.0
    assert capsys.readouterr().err.startswith("unhealthy: no answer from Triton at 127.0.0.1:")
    assert watchdog.main(["probe", "--url", fragile.http_url, "--model", "yolo_q1"]) == 0


def test_probe_overtakes_a_saturated_queue(fragile: EmbeddedServer, image: bytes) -> None:
    """With a queue of one request per priority level, user traffic fills level 2; the probe runs at 1."""
    results: list[int] = []
    with ThreadPoolExecutor(1) as pool:
        flood = pool.submit(burst, f"grpc://{fragile.grpc_url}", image, NO_RETRY, 32, 4)
        while not flood.done():
            results.append(watchdog.main(["probe", "--url", fragile.http_url, "--model", "yolo_q1"]))
        shed = [o for o in flood.result() if o.error is not None]
    assert shed, "the flood should have overflowed the queue"
    print(f"\nprobes during a flood that had {len(shed)} of {32 * 4} requests shed: {results.count(0)} of "
          f"{len(results)} passed")
    assert results and all(code == 0 for code in results)


def burst(url: str, image: bytes, retry: RetryPolicy, count: int = 32, rounds: int = 1) -> list[Outcome]:
    def one(_: int) -> Outcome:
        with DetectionClient(url, model="yolo_q1", timeout_s=30, retry=retry,
                             model_info=ModelInfo("yolo_q1", 1, ())) as client:
            start = time.monotonic()
            try:
                client.detect(image)
                return Outcome(start, time.monotonic(), None)
            except ClientError as exc:
                return Outcome(start, time.monotonic(), exc)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count * rounds)))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_overload_is_shed_fast_and_absorbed_by_retries(fragile: EmbeddedServer, image: bytes, protocol: str) -> None:
    url = f"{protocol}://{fragile.grpc_url if protocol == 'grpc' else fragile.http_url}"
    plain = burst(url, image, NO_RETRY)
    shed = [o for o in plain if o.error is not None]
    assert shed and all(isinstance(o.error, ServerUnavailableError) for o in shed)
    assert all("Exceeds maximum queue size" in str(o.error) for o in shed)
    shed_ms = sorted((o.end - o.start) * 1000 for o in shed)
    retried = burst(url, image, RetryPolicy(attempts=20, initial_backoff_s=0.05, max_backoff_s=1.0))
    lost = [o for o in retried if o.error is not None]
    print(f"\n{protocol}, 32 concurrent requests, queue of 1: without retries {len(shed)} shed "
          f"(median {shed_ms[len(shed_ms) // 2]:.0f} ms to the refusal); with retries {len(lost)} lost")
    assert len(lost) < len(shed) and all(isinstance(o.error, ServerUnavailableError) for o in lost)


def test_a_bad_image_is_not_retried(fragile: EmbeddedServer, caplog: pytest.LogCaptureFixture) -> None:
    """A retried request would count again in Triton's failure counter (which counts an ensemble failure twice
    on 2.51): the patient client must move it exactly as much as a client that never retries."""
    caplog.set_level(logging.DEBUG, logger="clients.retry")
    server = SimpleNamespace(metrics_url=fragile.metrics_url, model_name="yolo_q1")

    def failures_counted(retry: RetryPolicy) -> float:
        before = metric(server, "nv_inference_request_failure")
        with DetectionClient(fragile.grpc_url, model="yolo_q1", retry=retry) as client, \
                pytest.raises(InferenceError, match="invalid image"):
            client.detect(b"not an image")
        metric_delta(server, "nv_inference_request_failure", before, 1)
        time.sleep(0.5)  # a retry would land meanwhile
        return metric(server, "nv_inference_request_failure") - before

    assert failures_counted(RECONNECT) == failures_counted(NO_RETRY) > 0
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
