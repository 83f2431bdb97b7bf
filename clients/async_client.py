"""asyncio detection client: the `DetectionClient` API with awaitable calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
from opentelemetry.trace import TracerProvider

from clients._async_transport import AsyncTransport
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
from clients.retry import DEFAULT_RETRY, RetryPolicy, acall_with_retries
from clients.sync_client import DEFAULT_URL, check_timeout, locate
from clients.tasks import requested_outputs
from clients.tls import ca_options
from clients.tracing import request_span

T = TypeVar("T")


class AsyncDetectionClient:
    """Like `DetectionClient`, on tritonclient's asyncio clients. Use one instance per event loop."""

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
        options = {**ca_options(self.endpoint, ca_cert, aio=True), **(client_options or {})}
        self._transport = AsyncTransport(self.endpoint, self.timeout_s, options, verbose)
        self._info: ModelInfo | None = model_info
        self._tracer_provider = tracer_provider

    async def __aenter__(self) -> AsyncDetectionClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._transport.close()

    async def _call(self, what: str, attempt: Callable[[float], Awaitable[T]]) -> T:
        return await acall_with_retries(attempt, self.retry, self.timeout_s, f"{what} at {self.endpoint}")

    async def model_info(self) -> ModelInfo:
        """Batch limit and class names of the ensemble, fetched on first call."""
        if self._info is None:
            metadata = await self._call("model metadata", partial(self._transport.model_metadata, self.model))
            headers = admin_headers(self.endpoint.protocol, self._admin_key)
            config = None
            try:
                config = await self._call(
                    "model config", lambda t: self._transport.model_config(self.model, t, headers)
                )
            except RestrictedApiError as exc:
                without_config(self.endpoint, self.model, exc, self._admin_key)
            self._info = info_from_answers(self.model, metadata, config)
        return self._info

    async def detect(self, image: ImageInput) -> DetectionResult:
        """Detections for one encoded image (bytes) or image file (path)."""
        return (await self.detect_many([image]))[0]

    async def detect_many(self, images: Sequence[ImageInput]) -> list[DetectionResult]:
        """One request per `max_batch_size` images, sent concurrently; results in input order."""
        data = [image_bytes(image) for image in images]
        if not data:
            return []
        info = await self.model_info()
        try:
            results = await self._detect_chunks(data, info)
        except InferenceError as exc:
            learned = learn_batch_limit(info, exc)
            if learned is None:
                raise
            self._info = learned
            results = await self._detect_chunks(data, learned)
        if len(results) != len(data):
            raise ClientError(f"model {self.model!r} returned {len(results)} results for {len(data)} images")
        return results

    async def _detect_chunks(self, data: list[bytes], info: ModelInfo) -> list[DetectionResult]:
        chunks = split_batches(len(data), info.max_batch_size)
        tasks = [asyncio.ensure_future(self._infer(data, c, len(chunks), info)) for c in chunks]
        try:
            answers = await asyncio.gather(*tasks)
        finally:  # on the first failure, do not leave the other requests running unobserved
            for task in tasks:
                task.cancel()
        return [result for outputs in answers for result in decode_outputs(outputs, info)]

    async def _infer(
        self, data: list[bytes], chunk: range, chunks: int, info: ModelInfo
    ) -> dict[str, np.ndarray]:
        images = data[chunk.start : chunk.stop]
        with request_span(self.model, self.endpoint.address, self.endpoint.protocol, len(images),
                          self._tracer_provider) as headers:
            try:
                return await self._call(
                    "inference", partial(self._transport.infer, self.model, images, info.batched, headers=headers,
                                         outputs=requested_outputs(info.task, info.second_stage))
                )
            except InferenceError as exc:
                raise locate(exc, chunk, chunks) from exc

    async def wait_until_ready(self, timeout_s: float = 60.0, poll_s: float = 0.25) -> None:
        """Wait until the server and the model are ready; ServerUnavailableError after `timeout_s`."""
        deadline = time.monotonic() + check_timeout(timeout_s)
        reason = "not ready"
        while True:
            remaining = deadline - time.monotonic()
            try:
                if await self._transport.is_ready(self.model, max(0.05, min(self.timeout_s, remaining))):
                    return
                reason = f"server or model {self.model!r} not ready"
            except (ServerUnavailableError, ClientTimeoutError) as exc:
                reason = str(exc)
            if remaining <= 0:
                raise ServerUnavailableError(f"{self.endpoint} not ready after {timeout_s:g} s: {reason}")
            await asyncio.sleep(min(poll_s, max(remaining, 0.0)))
