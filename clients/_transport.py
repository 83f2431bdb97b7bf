"""Blocking transport: the few tritonclient calls the sync client needs, for gRPC and HTTP alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from clients._errors_map import translate_error
from clients.detection import OUTPUT_NAMES
from clients.endpoint import Endpoint
from clients.errors import ClientError
from clients.nodelay import disable_nagle
from clients.request import image_request

T = TypeVar("T")


class SyncTransport:
    """Owns one tritonclient client; every call is bounded by its `timeout_s` and raises only `ClientError`s."""

    def __init__(
        self,
        endpoint: Endpoint,
        timeout_s: float,
        options: Mapping[str, Any] | None = None,
        verbose: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        opts = dict(options or {})
        try:
            if endpoint.protocol == "grpc":
                import tritonclient.grpc as module

                self._module: Any = module
                self._client: Any = module.InferenceServerClient(
                    endpoint.address, verbose=verbose, ssl=endpoint.ssl, **opts
                )
            else:
                import tritonclient.http as module

                self._module = module
                self._client = module.InferenceServerClient(
                    endpoint.address,
                    verbose=verbose,
                    ssl=endpoint.ssl,
                    connection_timeout=timeout_s,
                    network_timeout=timeout_s,
                    **opts,
                )
                disable_nagle(self._client._client_stub)
        except Exception as exc:
            raise translate_error(exc, endpoint, timeout_s) from exc

    def _call(self, timeout_s: float, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """gRPC takes a deadline per call; the gevent-based HTTP client gets a gevent timeout around the call,
        which closes the connection it interrupts (geventhttpclient releases an unfinished response's socket)."""
        try:
            if self.endpoint.protocol == "grpc":
                return call(*args, client_timeout=timeout_s, **kwargs)
            import gevent

            with gevent.Timeout(timeout_s, TimeoutError):
                return call(*args, **kwargs)
        except Exception as exc:
            raise translate_error(exc, self.endpoint, timeout_s) from exc

    def infer(self, model: str, images: Sequence[bytes], batched: bool, timeout_s: float,
              headers: Mapping[str, str] | None = None, outputs: Sequence[str] = OUTPUT_NAMES,
              ) -> dict[str, np.ndarray]:
        """One request carrying all `images`: shape [N, 1] BYTES, or [1] for a model without batching.

        `headers` (the trace context) go as HTTP headers or gRPC metadata."""
        inputs, requested = image_request(self._module, images, batched, outputs)
        result = self._call(timeout_s, self._client.infer, model, inputs, outputs=requested,
                            headers=dict(headers) if headers else None)
        return {name: result.as_numpy(name) for name in outputs}

    def model_metadata(self, model: str, timeout_s: float) -> dict[str, Any]:
        kwargs = {"as_json": True} if self.endpoint.protocol == "grpc" else {}
        return _mapping(self._call(timeout_s, self._client.get_model_metadata, model, **kwargs), "metadata",
                        self.endpoint)

    def model_config(self, model: str, timeout_s: float, headers: Mapping[str, str]) -> dict[str, Any]:
        kwargs = {"as_json": True} if self.endpoint.protocol == "grpc" else {}
        config = self._call(timeout_s, self._client.get_model_config, model, headers=dict(headers) or None,
                            **kwargs)
        return _mapping(config, "config", self.endpoint)

    def is_ready(self, model: str, timeout_s: float) -> bool:
        """Server and model both ready; raises when the server cannot be reached at all."""
        return bool(self._call(timeout_s, self._client.is_server_ready)) and bool(
            self._call(timeout_s, self._client.is_model_ready, model)
        )

    def close(self) -> None:
        self._client.close()


def _mapping(answer: Any, what: str, endpoint: Endpoint) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ClientError(f"unexpected model {what} answer from {endpoint}: {type(answer).__name__}")
    return answer
