"""The admin client of a running Triton: its model repository API (load, unload, what is loaded) with the admin
key, and its metrics endpoint. ``generator rollout`` / ``rollback`` drive versions with it; ``generator serve`` names
the models it serves with it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from generator.errors import GeneratorError
from generator.operate.rollout.window import Scrape, parse_scrape
from generator.serving.contract import ADMIN_HEADER

PENDING = "nv_inference_pending_request_count"


class TritonAdminError(GeneratorError):
    """Triton refused or did not answer an admin call."""


class TritonRefusedError(TritonAdminError):
    """Triton answered a call with an error status (a model that fails to load: 400)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Control(Protocol):
    """What the rollout drives: one server (ModelControl) or every server behind one name (fleet.FleetControl)."""

    def load(self, model: str) -> None: ...
    def unload(self, model: str) -> None: ...
    def unload_loaded(self, models: Iterable[str]) -> None: ...
    def loaded(self, timeout_s: float | None = None) -> set[str]: ...
    def samples(self) -> Scrape: ...
    def wait_idle(self, models: Iterable[str], timeout_s: float, quiet_s: float = 1.0, poll_s: float = 0.25
                  ) -> float: ...
    def infer_urls(self, clients_url: str) -> list[str]: ...


@dataclass(frozen=True)
class ModelControl:
    """Load and unload models of a server started with ``--model-control explicit`` (serve --model-control)."""

    http_url: str  # host:port of Triton's HTTP endpoint
    metrics_url: str  # host:port of its metrics endpoint
    admin_key: str | None = None
    timeout_s: float = 300.0  # a load builds ONNX Runtime sessions and warms up: seconds to minutes

    def _post(self, path: str, body: dict[str, object] | None = None, timeout_s: float | None = None) -> bytes:
        headers = {"Content-Type": "application/json"}
        if self.admin_key:
            headers[ADMIN_HEADER] = self.admin_key
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=json.dumps(body or {}).encode(),
                                         method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            hint = " (pass --admin-token or set TRITON_ADMIN_TOKEN)" if exc.code == 403 else ""
            raise TritonRefusedError(f"{path}: HTTP {exc.code}: {detail}{hint}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise TritonAdminError(f"cannot reach Triton at {self.http_url}: {exc}") from None

    def load(self, model: str) -> None:
        """Load (or reload, after its config changed) ``model``; an ensemble brings its steps. Triton keeps the
        loaded instance serving until the new one is ready."""
        self._post(f"/v2/repository/models/{model}/load")

    def unload(self, model: str) -> None:
        """Unload ``model`` and, for an ensemble, the steps nothing else uses."""
        self._post(f"/v2/repository/models/{model}/unload", {"parameters": {"unload_dependents": True}})

    def unload_loaded(self, models: Iterable[str]) -> None:
        """Unload each of ``models`` that is loaded (after a restart some are not)."""
        loaded = self.loaded(timeout_s=10)
        for model in models:
            if model in loaded:
                self.unload(model)

    def loaded(self, timeout_s: float | None = None) -> set[str]:
        """The names of the models Triton has loaded (state READY)."""
        index = json.loads(self._post("/v2/repository/index", timeout_s=timeout_s))
        return {m["name"] for m in index if m.get("state") == "READY"}

    def scrape(self) -> str:
        try:
            with urllib.request.urlopen(f"http://{self.metrics_url}/metrics", timeout=10) as response:
                return str(response.read().decode())
        except (urllib.error.URLError, OSError) as exc:
            raise TritonAdminError(f"cannot read Triton's metrics at {self.metrics_url}: {exc}") from None

    def samples(self) -> Scrape:
        """The metrics, parsed (window.parse_scrape)."""
        return parse_scrape(self.scrape())

    def infer_urls(self, clients_url: str) -> list[str]:
        """Where a request reaches each server: one server, so the clients' own URL."""
        return [clients_url]

    def wait_idle(self, models: Iterable[str], timeout_s: float, quiet_s: float = 1.0, poll_s: float = 0.25
                  ) -> float:
        """Wait until ``models`` are idle: nothing pending and no request counted for ``quiet_s``; seconds waited.

        The pending gauge alone misses an ensemble request between two steps; a count that stops moving does
        not. Gives up after ``timeout_s`` (the caller's drain budget).
        """
        wanted, start = set(models), time.monotonic()
        quiet_since, last = start, None
        while time.monotonic() - start < timeout_s:
            scrape = parse_scrape(self.scrape())
            pending = _sum(scrape, PENDING, wanted)
            handled = _sum(scrape, "nv_inference_request_success", wanted) + _sum(
                scrape, "nv_inference_request_failure", wanted)
            now = time.monotonic()
            if pending or handled != last:
                quiet_since, last = now, handled
            elif now - quiet_since >= quiet_s:
                return now - start
            time.sleep(poll_s)
        return time.monotonic() - start


def _sum(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, models: set[str]) -> float:
    return sum(v for (sample, labels), v in scrape.items() if sample == name and dict(labels).get("model") in models)
