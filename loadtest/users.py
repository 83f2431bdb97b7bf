"""Locust users that drive the detection ensemble with tritonclient, over gRPC or HTTP.

Every call is reported through ``environment.events.request`` (request_type ``grpc``/``http``, name = the
model, response time in ms, bytes received, exception), so Locust's statistics, CSV and HTML report see
them like any built-in client. Importing this module requires Locust (which monkey-patches the process for
gevent); the gRPC library is switched to gevent here, before any channel exists, or every user would block
the others (locustio/locust #2339).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import grpc.experimental.gevent as grpc_gevent
from locust import User, task
from locust.env import Environment

from clients.canary import Route, Splitter, read_route
from clients.nodelay import disable_nagle
from clients.request import image_request
from clients.tasks import requested_outputs, task_of_outputs
from generator.serving.contract import BOX_CLASSES

from .errors import InferenceFailed
from .failures import REFUSED_PREFIX, Backoff, named_failure, refusal
from .images import DEFAULT_SIZES, build_corpus
from .report import threshold_breaches
from .target import host_of, user_address
from .task_outputs import BOOK as OUTPUTS_BOOK
from .task_outputs import TWO_STAGE, check_outputs, check_two_stage

grpc_gevent.init_gevent()


def add_locust_arguments(parser: Any) -> None:
    """Custom Locust options (each also settable by environment variable, for ``locust`` run by hand)."""
    group = parser.add_argument_group("Triton detection ensemble")
    group.add_argument("--triton-model", env_var="LOADTEST_MODEL", default="yolo", help="ensemble to call")
    group.add_argument("--triton-images", env_var="LOADTEST_IMAGES", default="",
                       help="folder of encoded images (default: synthetic JPEG scenes)")
    group.add_argument("--triton-sizes", env_var="LOADTEST_SIZES", default=DEFAULT_SIZES,
                       help="synthetic image sizes, WIDTHxHEIGHT or vga/720p/1080p, comma-separated")
    group.add_argument("--triton-images-per-size", env_var="LOADTEST_IMAGES_PER_SIZE", type=int, default=4)
    group.add_argument("--triton-timeout", env_var="LOADTEST_TIMEOUT", type=float, default=30.0,
                       help="per-request timeout in seconds")
    group.add_argument("--triton-think-ms", env_var="LOADTEST_THINK_MS", type=float, default=0.0,
                       help="wait between a user's requests (0: closed loop, users = concurrency)")
    group.add_argument("--triton-sla-p95-ms", env_var="LOADTEST_SLA_P95_MS", type=float, default=None,
                       help="exit non-zero if the p95 latency exceeds this")
    group.add_argument("--triton-max-fail-ratio", env_var="LOADTEST_MAX_FAIL_RATIO", type=float, default=None,
                       help="exit non-zero if the failure ratio exceeds this")
    group.add_argument("--triton-ca-cert", "--ca-cert", env_var="LOADTEST_CA_CERT", default="",
                       help="CA certificate for grpcs:// and https:// hosts (the deploy's TLS proxy)")
    group.add_argument("--triton-route-file", env_var="LOADTEST_ROUTE_FILE", default="",
                       help="follow the stable/canary split `generator rollout` publishes (routing.json): that share "
                            "of the requests goes to the canary version, reported under its name")
    group.add_argument("--triton-camera-fps", env_var="LOADTEST_CAMERA_FPS", type=float, default=5.0,
                       help="camera users: frames per second of each camera")
    group.add_argument("--triton-video", env_var="LOADTEST_VIDEO", default="",
                       help="camera users: a video file whose frames they send (default: the image corpus)")
    group.add_argument("--triton-runinfo", env_var="LOADTEST_RUNINFO", default="",
                       help="write run facts (users, CPU warnings, totals) as JSON here when Locust quits")


@dataclass(frozen=True)
class UserSettings:
    model: str
    images: Path | None
    sizes: str
    images_per_size: int
    timeout_s: float
    think_s: float
    ca_cert: str = ""
    route_file: Path | None = None

    @classmethod
    def from_options(cls, options: argparse.Namespace | None) -> UserSettings:
        def get(name: str, env: str, default: Any) -> Any:
            value = getattr(options, name, None) if options is not None else None
            return value if value not in (None, "") else os.environ.get(env, default)

        images = get("triton_images", "LOADTEST_IMAGES", "")
        route = get("triton_route_file", "LOADTEST_ROUTE_FILE", "")
        return cls(
            model=str(get("triton_model", "LOADTEST_MODEL", "yolo")),
            images=Path(images) if images else None,
            sizes=str(get("triton_sizes", "LOADTEST_SIZES", DEFAULT_SIZES)),
            images_per_size=int(get("triton_images_per_size", "LOADTEST_IMAGES_PER_SIZE", 4)),
            timeout_s=float(get("triton_timeout", "LOADTEST_TIMEOUT", 30.0)),
            think_s=float(get("triton_think_ms", "LOADTEST_THINK_MS", 0.0)) / 1000.0,
            ca_cert=str(get("triton_ca_cert", "LOADTEST_CA_CERT", "")),
            route_file=Path(route) if route else None,
        )


_CORPORA: dict[tuple[Path | None, str, int], list[bytes]] = {}


def corpus_for(settings: UserSettings) -> list[bytes]:
    """One corpus per process, shared by all its users (encoding scenes is not free)."""
    key = (settings.images, settings.sizes, settings.images_per_size)
    if key not in _CORPORA:
        _CORPORA[key] = build_corpus(settings.images, settings.sizes, settings.images_per_size)
    return _CORPORA[key]


def _address(host: str | None, protocol: str) -> tuple[str, bool]:
    """(address, TLS) of the Locust host: plain Triton, or the deploy's TLS proxy (grpcs://, https://)."""
    if not host:
        raise InferenceFailed("no Triton URL: pass --host HOST:PORT to Locust")
    return user_address(host, protocol)


class TritonUser(User):
    """One camera-like client: sends encoded images to the ensemble back to back and reports each call."""

    abstract = True
    protocol: ClassVar[str] = ""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.settings = UserSettings.from_options(environment.parsed_options)
        self.images = self.load_images()
        self._cursor = random.randrange(len(self.images))  # users start at different images
        self._requests: list[Any] = []  # built once the model's task is known (request())
        self.task: str | None = None
        self.second_stage = False  # a two-stage ensemble (its outputs name the per-box classes)
        self._split = Splitter()
        self._route: tuple[int, Route] | None = None  # (mtime_ns, route) of the route file
        self._backoff = Backoff()

    def load_images(self) -> list[bytes]:
        """The encoded images this user sends (the process's shared corpus)."""
        return corpus_for(self.settings)

    def model(self) -> str:
        """The model of the next request: the canary for the route's share, else the stable one."""
        path = self.settings.route_file
        if path is None:
            return self.settings.model
        stamp = path.stat().st_mtime_ns
        if self._route is None or self._route[0] != stamp:
            self._route = (stamp, read_route(path))
        route = self._route[1]
        if route.canary is not None and self._split.to_canary(route.canary_percent):
            return route.canary
        return route.stable

    def wait_time(self) -> float:
        return self.settings.think_s

    def on_start(self) -> None:
        self.connect()

    def connect(self) -> None:
        raise NotImplementedError

    def output_names(self, model: str) -> list[str]:
        """The outputs ``model`` declares in its metadata (they tell its task)."""
        raise NotImplementedError

    def request(self, index: int) -> Any:
        """The prepared request of image ``index``; the first call asks the model its task (a failure there is the
        request's, reported like any other), so each request names the task's outputs."""
        if not self._requests:
            names = self.output_names(self.settings.model)
            self.task, self.second_stage = task_of_outputs(names), BOX_CLASSES in names
            self._requests = [self.prepare(image) for image in self.images]
        return self._requests[index % len(self._requests)]

    def check(self, result: Any) -> None:
        """Check one answer of the task and count what it carries (task_outputs)."""
        assert self.task is not None
        if self.second_stage:
            OUTPUTS_BOOK.count(TWO_STAGE, check_two_stage(result.as_numpy))
            return
        OUTPUTS_BOOK.count(self.task, check_outputs(self.task, result.as_numpy))

    @property
    def outputs(self) -> tuple[str, ...]:
        """The outputs each request names: the task's, or a two-stage ensemble's."""
        assert self.task is not None
        return requested_outputs(self.task, self.second_stage)

    def prepare(self, image: bytes) -> Any:
        """Build the request for one image once, so serialisation is not timed on every call."""
        raise NotImplementedError

    def send(self, request: Any, model: str) -> int:
        """Send one prepared request to ``model``; return the number of bytes received; raise on any failure."""
        raise NotImplementedError

    @task
    def detect(self) -> None:
        cursor = self._cursor
        self._cursor = (self._cursor + 1) % len(self.images)
        start_time = time.time()
        start = time.perf_counter()
        received, model, unreached, busy_s = 0, self.settings.model, False, 0.0
        error: BaseException | None = None
        try:
            model = self.model()
            received = self.send(self.request(cursor), model)
        except Exception as exc:  # noqa: BLE001 -- every failure is a data point for Locust, not a crash
            refused = refusal(exc)
            if refused is not None:
                error, busy_s = refused
            else:
                error, unreached = named_failure(exc, _address(self.host, self.protocol)[0])
        self.environment.events.request.fire(
            request_type=self.protocol,
            name=model,
            response_time=(time.perf_counter() - start) * 1000.0,
            response_length=received,
            response=None,
            context={},
            exception=error,
            start_time=start_time,
            url=self.host,
        )
        if unreached:
            time.sleep(self._backoff.failed())  # gevent's sleep under Locust: the other users go on
        else:
            self._backoff.reached()
            time.sleep(busy_s)  # back-pressure: not before the Retry-After the server named


class TritonGrpcUser(TritonUser):
    """tritonclient.grpc on a gevent-friendly channel (one channel per user)."""

    abstract = True
    protocol = "grpc"

    def connect(self) -> None:
        import tritonclient.grpc as grpcclient

        self._grpc = grpcclient
        address, tls = _address(self.host, "grpc")
        ssl = {"ssl": True, "root_certificates": self.settings.ca_cert or None} if tls else {}
        self.client = grpcclient.InferenceServerClient(address, **ssl)

    def output_names(self, model: str) -> list[str]:
        metadata = self.client.get_model_metadata(model, client_timeout=self.settings.timeout_s)
        return [output.name for output in metadata.outputs]

    def prepare(self, image: bytes) -> Any:
        return image_request(self._grpc, [image], outputs=self.outputs)

    def send(self, request: Any, model: str) -> int:
        inputs, outputs = request
        result = self.client.infer(
            model, inputs, outputs=outputs, client_timeout=self.settings.timeout_s
        )
        self.check(result)
        return int(result.get_response().ByteSize())

    def on_stop(self) -> None:
        """Close the channel and let its objects go now: gRPC under gevent waits at interpreter exit for channel
        objects still alive (grpc/grpc #20299), which hung Locust's exit in 1 run of 3 over TLS (measured)."""
        import gc

        self.client.close()
        del self.client
        self._requests = []
        gc.collect()


class TritonHttpUser(TritonUser):
    """tritonclient.http's public request/response codec on a geventhttpclient connection.

    ``generate_request_body`` and ``InferResult.from_response_body`` are tritonclient's documented hooks for
    custom transports; owning the connection lets the user report the exact bytes received.
    """

    abstract = True
    protocol = "http"

    def connect(self) -> None:
        import tritonclient.http as httpclient
        from geventhttpclient import HTTPClient

        self._http = httpclient
        address, tls = _address(self.host, "http")
        host_port, _, path = address.partition("/")
        self._prefix = f"/{path}" if path else ""
        ssl: dict[str, Any] = {}
        if tls:
            ssl = {"ssl": True, "ssl_options": {"ca_certs": self.settings.ca_cert} if self.settings.ca_cert else {}}
        self.client = HTTPClient(
            host_of(address).strip("[]"), int(host_port.rpartition(":")[2]), connection_timeout=self.settings.timeout_s,
            network_timeout=self.settings.timeout_s, concurrency=1, **ssl,
        )
        disable_nagle(self.client)  # over TLS, Nagle adds a delayed ACK (40 ms) to every request

    def output_names(self, model: str) -> list[str]:
        response = self.client.get(f"{self._prefix}/v2/models/{model}")
        data = response.read()
        if response.status_code != 200:
            raise InferenceFailed(f"HTTP {response.status_code} on the metadata of {model}: {data[:200]!r}")
        return [output["name"] for output in json.loads(data).get("outputs", [])]

    def prepare(self, image: bytes) -> Any:
        # binary tensors: tritonclient.http's default
        inputs, outputs = image_request(self._http, [image], outputs=self.outputs)
        body, json_size = self._http.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
        headers = {"Inference-Header-Content-Length": str(json_size)} if json_size is not None else {}
        return body, headers

    def send(self, request: Any, model: str) -> int:
        body, headers = request
        response = self.client.post(f"{self._prefix}/v2/models/{model}/infer", body=body, headers=headers)
        data = response.read()
        if response.status_code != 200:
            try:
                message = json.loads(data).get("error", "")
            except ValueError:
                message = data[:200].decode("utf-8", "replace")
            raise InferenceFailed(f"HTTP {response.status_code}: {message}")
        header = response.get("Inference-Header-Content-Length")  # geventhttpclient 2.6: str, or a list if repeated
        header_length = int(header if isinstance(header, str) else header[0]) if header else None
        result = self._http.InferResult.from_response_body(data, header_length=header_length)
        self.check(result)
        return len(data)

    def on_stop(self) -> None:
        self.client.close()


def quitting_report(environment: Environment, max_users: int, workers: int = 0) -> dict[str, Any]:
    """Apply the SLA/failure thresholds (setting Locust's exit code) and collect the run's facts."""
    from locust.runners import WorkerRunner

    runner = environment.runner
    info: dict[str, Any] = {"runner": type(runner).__name__, "max_users": max_users}
    if isinstance(runner, WorkerRunner):
        return info
    total = environment.stats.total
    options = environment.parsed_options
    sla = getattr(options, "triton_sla_p95_ms", None)
    max_fail = getattr(options, "triton_max_fail_ratio", None)
    p95 = total.get_response_time_percentile(0.95) if total.num_requests - total.num_failures > 0 else None
    # Refusals under overload are back-pressure the users obeyed, not errors: the failure ratio leaves them out.
    # Errors from workers arrive as their repr(), hence a substring match.
    refused = sum(e.occurrences for e in environment.stats.errors.values() if REFUSED_PREFIX in str(e.error))
    errors = total.num_failures - refused
    reasons = threshold_breaches(p95, errors / total.num_requests if total.num_requests else 0.0, total.num_requests,
                                 sla, max_fail)
    if sla is not None or max_fail is not None:
        environment.process_exit_code = 2 if reasons else 0
    ok = total.num_requests - total.num_failures > 0

    def pct(q: float) -> float | None:
        return float(total.get_response_time_percentile(q)) if ok else None

    info.update(
        requests=total.num_requests,
        failures=errors,
        refused=refused,
        p50_ms=pct(0.50),
        p90_ms=pct(0.90),
        p95_ms=p95,
        p99_ms=pct(0.99),
        avg_ms=round(total.avg_response_time, 2) if ok else None,
        min_ms=round(total.min_response_time, 2) if ok and total.min_response_time is not None else None,
        max_ms=round(total.max_response_time, 2) if ok else None,
        avg_response_bytes=round(total.avg_content_length, 1) if ok else None,
        elapsed_s=round(max(total.last_request_timestamp - total.start_time, 0.0), 3)
        if total.last_request_timestamp
        else 0.0,
        breaches=reasons,
        cpu_warning=bool(getattr(runner, "cpu_warning_emitted", False)),
        worker_cpu_warning=bool(getattr(runner, "worker_cpu_warning_emitted", False)),
        workers=workers,
    )
    return info
