"""asyncio transport over tritonclient.grpc.aio / tritonclient.http.aio; mirrors `SyncTransport`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from clients._errors_map import translate_error
from clients._transport import _mapping
from clients.detection import OUTPUT_NAMES
from clients.endpoint import Endpoint
from clients.request import image_request


class AsyncTransport:
    """Creates its tritonclient client lazily, inside the running loop (aiohttp insists on that)."""

    def __init__(
        self,
        endpoint: Endpoint,
        timeout_s: float,
        options: Mapping[str, Any] | None = None,
        verbose: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._options = dict(options or {})
        self._verbose = verbose
        self._module: Any = None
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            if self.endpoint.protocol == "grpc":
                import tritonclient.grpc.aio as grpc_aio

                self._module = grpc_aio
                self._client = grpc_aio.InferenceServerClient(
                    self.endpoint.address, verbose=self._verbose, ssl=self.endpoint.ssl, **self._options
                )
            else:
                import tritonclient.http.aio as http_aio

                self._module = http_aio
                self._client = http_aio.InferenceServerClient(
                    self.endpoint.address,
                    verbose=self._verbose,
                    ssl=self.endpoint.ssl,
                    conn_timeout=self.timeout_s,
                    **self._options,
                )
        except Exception as exc:
            raise translate_error(exc, self.endpoint, self.timeout_s) from exc
        return self._client

    async def _call(self, method: str, *args: Any, timeout_s: float, **kwargs: Any) -> Any:
        client = self._get_client()
        try:
            if self.endpoint.protocol == "grpc":
                return await getattr(client, method)(*args, client_timeout=timeout_s, **kwargs)
            # aiohttp's session timeout covers the request; wait_for also bounds a shorter per-call limit.
            return await asyncio.wait_for(getattr(client, method)(*args, **kwargs), timeout_s)
        except Exception as exc:
            raise translate_error(exc, self.endpoint, timeout_s) from exc

    async def infer(
        self, model: str, images: Sequence[bytes], batched: bool, timeout_s: float,
        headers: Mapping[str, str] | None = None, outputs: Sequence[str] = OUTPUT_NAMES,
    ) -> dict[str, np.ndarray]:
        """One request carrying all `images`: shape [N, 1] BYTES, or [1] for a model without batching."""
        self._get_client()
        inputs, requested = image_request(self._module, images, batched, outputs)
        result = await self._call("infer", model, inputs, outputs=requested, headers=dict(headers) if headers else None,
                                  timeout_s=timeout_s)
        return {name: result.as_numpy(name) for name in outputs}

    async def model_metadata(self, model: str, timeout_s: float) -> dict[str, Any]:
        kwargs = {"as_json": True} if self.endpoint.protocol == "grpc" else {}
        answer = await self._call("get_model_metadata", model, timeout_s=timeout_s, **kwargs)
        return _mapping(answer, "metadata", self.endpoint)

    async def model_config(self, model: str, timeout_s: float, headers: Mapping[str, str]) -> dict[str, Any]:
        kwargs = {"as_json": True} if self.endpoint.protocol == "grpc" else {}
        answer = await self._call("get_model_config", model, headers=dict(headers) or None, timeout_s=timeout_s,
                                  **kwargs)
        return _mapping(answer, "config", self.endpoint)

    async def is_ready(self, model: str, timeout_s: float) -> bool:
        """Server and model both ready; raises when the server cannot be reached at all."""
        server = await self._call("is_server_ready", timeout_s=timeout_s)
        return bool(server) and bool(await self._call("is_model_ready", model, timeout_s=timeout_s))

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
