"""Blocking detection client over gRPC or HTTP."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry.trace import TracerProvider

from clients._transport import SyncTransport
from clients.contract import admin_headers, info_from_answers, learn_batch_limit, without_config
from clients.detection import DetectionResult, ModelInfo, decode_outputs, split_batches
from clients.endpoint import Endpoint, parse_endpoint
from clients.errors import (
    ClientError,
    ClientTimeoutError,
    InferenceError,
    RestrictedApiError,
    ServerUnavailableError,
)
from clients.images import ImageInput, image_bytes
from clients.retry import DEFAULT_RETRY, RetryPolicy, call_with_retries
from clients.tasks import requested_outputs
from clients.tls import ca_options
from clients.tracing import request_span

T = TypeVar("T")
DEFAULT_URL = "127.0.0.1:8001"


def check_timeout(timeout_s: float) -> float:
    """Reject timeouts that would mean 'wait forever' or fail every call."""
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise ClientError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    return float(timeout_s)


def locate(exc: InferenceError, chunk: range, chunks: int) -> InferenceError:
    """Say which images a failed request held when a call was split (Triton counts from 0 per request)."""
    if chunks == 1:
        return exc
    return InferenceError(f"request for images {chunk.start}..{chunk.stop - 1}: {exc}", status=exc.status)


class DetectionClient:
    """Send encoded images to the detection ensemble and get typed detections back.

    The protocol comes from the URL scheme (`grpc://`, `grpcs://`, `http://`, `https://`) or `protocol`,
    gRPC for a bare `host:port`; `ca_cert` is the CA a `grpcs://`/`https://` server's certificate is signed by (a
    deployment's own CA; default: the system's trust store). `timeout_s` is the deadline of each request, retries included; `retry`
    says how often a request the server could not take (overload, restart) is sent again. The contract
    (batch limit, class names) is read once, on first use, without the restricted model-config API unless
    `admin_key` is given (see clients/contract.py), or taken as given from `model_info`.
    The HTTP flavour is gevent-based: use one client per thread. Every inference request carries the W3C
    trace context of an OpenTelemetry CLIENT span (clients/tracing.py), from `tracer_provider` or the global one.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        protocol: str | None = None,
        model: str = "yolo",
        timeout_s: float = 10.0,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        admin_key: str | None = None,
        model_info: ModelInfo | None = None,
        client_options: Mapping[str, Any] | None = None,
        verbose: bool = False,
        tracer_provider: TracerProvider | None = None,
        ca_cert: str | Path | None = None,
    ) -> None:
        self.endpoint: Endpoint = parse_endpoint(url, protocol)
        self.model = model
        self.timeout_s = check_timeout(timeout_s)
        self.retry = retry
        self._admin_key = admin_key
        options = {**ca_options(self.endpoint, ca_cert), **(client_options or {})}
        self._transport = SyncTransport(self.endpoint, self.timeout_s, options, verbose)
        self._info: ModelInfo | None = model_info
        self._tracer_provider = tracer_provider

    def __enter__(self) -> DetectionClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._transport.close()

    def _call(self, what: str, attempt: Callable[[float], T]) -> T:
        return call_with_retries(attempt, self.retry, self.timeout_s, f"{what} at {self.endpoint}")

    @property
    def model_info(self) -> ModelInfo:
        """Batch limit and class names of the ensemble, fetched on first access."""
        if self._info is None:
            metadata = self._call("model metadata", lambda t: self._transport.model_metadata(self.model, t))
            headers = admin_headers(self.endpoint.protocol, self._admin_key)
            config = None
            try:
                config = self._call("model config", lambda t: self._transport.model_config(self.model, t, headers))
            except RestrictedApiError as exc:
                without_config(self.endpoint, self.model, exc, self._admin_key)
            self._info = info_from_answers(self.model, metadata, config)
        return self._info

    def detect(self, image: ImageInput) -> DetectionResult:
        """Detections for one encoded image (bytes) or image file (path)."""
        return self.detect_many([image])[0]

    def detect_many(self, images: Sequence[ImageInput]) -> list[DetectionResult]:
        """One request per `max_batch_size` images, results in input order.

        A request fails as a whole: if the server rejects one image, the others of that request get no result.
        """
        data = [image_bytes(image) for image in images]
        if not data:
            return []
        info = self.model_info
        try:
            results = self._detect_chunks(data, info)
        except InferenceError as exc:
            learned = learn_batch_limit(info, exc)
            if learned is None:
                raise
            self._info = learned
            results = self._detect_chunks(data, learned)
        if len(results) != len(data):
            raise ClientError(f"model {self.model!r} returned {len(results)} results for {len(data)} images")
        return results

    def _detect_chunks(self, data: list[bytes], info: ModelInfo) -> list[DetectionResult]:
        results: list[DetectionResult] = []
        chunks = split_batches(len(data), info.max_batch_size)
        for chunk in chunks:
            images = data[chunk.start : chunk.stop]
            with request_span(self.model, self.endpoint.address, self.endpoint.protocol, len(images),
                              self._tracer_provider) as headers:
                try:
                    outputs = self._call("inference", partial(
                        self._transport.infer, self.model, images, info.batched, headers=headers,
                        outputs=requested_outputs(info.task, info.second_stage)))
                except InferenceError as exc:
                    raise locate(exc, chunk, len(chunks)) from exc
            results.extend(decode_outputs(outputs, info))
        return results

    def wait_until_ready(self, timeout_s: float = 60.0, poll_s: float = 0.25) -> None:
        """Block until the server and the model are ready; ServerUnavailableError after `timeout_s`."""
        deadline = time.monotonic() + check_timeout(timeout_s)
        reason = "not ready"
        while True:
            remaining = deadline - time.monotonic()
            try:
                if self._transport.is_ready(self.model, max(0.05, min(self.timeout_s, remaining))):
                    return
                reason = f"server or model {self.model!r} not ready"
            except (ServerUnavailableError, ClientTimeoutError) as exc:
                reason = str(exc)
            if remaining <= 0:
                raise ServerUnavailableError(f"{self.endpoint} not ready after {timeout_s:g} s: {reason}")
            time.sleep(min(poll_s, max(remaining, 0.0)))
