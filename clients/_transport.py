"""Blocking transport: the few tritonclient calls the sync client needs, for gRPC and HTTP alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from clients._errors_map import translate_error
from clients.detection import OUTPUT_NAMES
from clients.endpoint import Endpoint
from clients.errors import ClientError
from clients.request import image_request


class SyncTransport:
    """Owns one tritonclient client; every call has a timeout and raises only `ClientError`s."""

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
        except Exception as exc:
            raise translate_error(exc, endpoint, timeout_s) from exc

    def _timeout_kwargs(self, timeout_s: float | None = None) -> dict[str, float]:
        # HTTP timeouts live on the connection (set above); gRPC takes a deadline per call.
        return {"client_timeout": timeout_s or self.timeout_s} if self.endpoint.protocol == "grpc" else {}

    def infer(self, model: str, images: Sequence[bytes], batched: bool) -> dict[str, np.ndarray]:
        """One request carrying all `images`: shape [N, 1] BYTES, or [1] for a model without batching."""
        inputs, outputs = image_request(self._module, images, batched)
        try:
            result = self._client.infer(model, inputs, outputs=outputs, **self._timeout_kwargs())
            return {name: result.as_numpy(name) for name in OUTPUT_NAMES}
        except Exception as exc:
            raise translate_error(exc, self.endpoint, self.timeout_s) from exc

    def model_config(self, model: str) -> dict[str, Any]:
        try:
            if self.endpoint.protocol == "grpc":
                config: dict[str, Any] = self._client.get_model_config(
                    model, as_json=True, **self._timeout_kwargs()
                )
            else:
                config = self._client.get_model_config(model)
        except Exception as exc:
            raise translate_error(exc, self.endpoint, self.timeout_s) from exc
        if not isinstance(config, dict):
            raise ClientError(f"unexpected model config answer from {self.endpoint}: {type(config).__name__}")
        return config

    def is_ready(self, model: str, timeout_s: float | None = None) -> bool:
        """Server and model both ready; raises when the server cannot be reached at all."""
        kwargs = self._timeout_kwargs(timeout_s)
        try:
            return bool(self._client.is_server_ready(**kwargs)) and bool(
                self._client.is_model_ready(model, **kwargs)
            )
        except Exception as exc:
            raise translate_error(exc, self.endpoint, timeout_s or self.timeout_s) from exc

    def close(self) -> None:
        self._client.close()
