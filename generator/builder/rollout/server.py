"""The rollout's edge: Triton's model repository API (load, unload, readiness) with the admin key, its metrics
endpoint, and the mirrored control images sent through the project's client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from generator.builder.rollout.agreement import Detections
from generator.builder.rollout.window import parse_scrape
from generator.errors import GeneratorError
from generator.serving.contract import ADMIN_HEADER

PENDING = "nv_inference_pending_request_count"


class RolloutServerError(GeneratorError):
    """Triton refused or did not answer a call the rollout needs."""


class TritonRefusedError(RolloutServerError):
    """Triton answered a call with an error status (a model that fails to load: 400)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ModelControl:
    """Load and unload models of a server started with ``--model-control explicit`` (serve --model-control)."""

    http_url: str  # host:port of Triton's HTTP endpoint
    metrics_url: str  # host:port of its metrics endpoint
    admin_key: str | None = None
    timeout_s: float = 300.0  # a load builds ONNX Runtime sessions and warms up: seconds to minutes

    def _post(self, path: str, body: dict[str, object] | None = None) -> bytes:
        headers = {"Content-Type": "application/json"}
        if self.admin_key:
            headers[ADMIN_HEADER] = self.admin_key
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=json.dumps(body or {}).encode(),
                                         method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            hint = " (pass --admin-key or set TRITON_ADMIN_TOKEN)" if exc.code == 403 else ""
            raise TritonRefusedError(f"{path}: HTTP {exc.code}: {detail}{hint}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise RolloutServerError(f"cannot reach Triton at {self.http_url}: {exc}") from None

    def load(self, model: str) -> None:
        """Load (or reload, after its config changed) ``model``; an ensemble brings its steps. Triton keeps the
        loaded instance serving until the new one is ready."""
        self._post(f"/v2/repository/models/{model}/load")

    def unload(self, model: str) -> None:
        """Unload ``model`` and, for an ensemble, the steps nothing else uses."""
        self._post(f"/v2/repository/models/{model}/unload", {"parameters": {"unload_dependents": True}})

    def loaded(self) -> set[str]:
        return {m["name"] for m in json.loads(self._post("/v2/repository/index")) if m.get("state") == "READY"}

    def scrape(self) -> str:
        try:
            with urllib.request.urlopen(f"http://{self.metrics_url}/metrics", timeout=10) as response:
                return str(response.read().decode())
        except (urllib.error.URLError, OSError) as exc:
            raise RolloutServerError(f"cannot read Triton's metrics at {self.metrics_url}: {exc}") from None

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


def mirror(url: str, models: Sequence[str], images: Sequence[bytes], timeout_s: float = 30.0
           ) -> dict[str, list[Detections]]:
    """The detections of every model for the same control images, image by image (one client per model)."""
    from clients import DetectionClient

    results: dict[str, list[Detections]] = {m: [] for m in models}
    for model in models:
        with DetectionClient(url, model=model, timeout_s=timeout_s) as client:
            for image in images:
                found = client.detect(image)
                results[model].append((found.boxes, found.scores, found.class_ids))
    return results
