"""A weighted stable/canary split on the client side, steered by the route the rollout publishes.

``python -m generator rollout`` writes a small JSON route (``routing.json`` in the model repository, or where
``--route-file`` says): the stable model (the plain ensemble name), the canary (``NAME_vN``) and its share. A
``CanaryClient`` re-reads that file when it changes and sends that share of its requests to the canary, spread
evenly (request i goes to the canary when ``floor((i+1) p) > floor(i p)``), the rest to the stable model. A
canary that is being unloaded answers "unknown model" or "not ready" for a moment: such a request is sent to the
stable model instead, so a rollback never costs the caller a request.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from clients.detection import DetectionResult
from clients.errors import ClientError, InferenceError, ServerUnavailableError
from clients.images import ImageInput
from clients.sync_client import DetectionClient

logger = logging.getLogger(__name__)

# Triton's answers for a model that is not (or no longer) loaded (model_repository_manager.cc, infer handlers).
_GONE = ("unknown model", "is not ready", "no available version", "is not found", "unavailable")


@dataclass(frozen=True)
class Route:
    """Where requests go: ``stable`` always, ``canary`` for ``canary_percent`` of them (None: nowhere)."""

    stable: str
    canary: str | None = None
    canary_percent: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.canary_percent <= 100.0:
            raise ValueError(f"canary_percent must be within 0..100, got {self.canary_percent}")

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Route:
        try:
            canary = data.get("canary")
            return cls(str(data["stable"]), None if canary is None else str(canary),
                       float(data.get("canary_percent", 0.0)))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as exc:
            raise ClientError(f"the route is malformed ({type(exc).__name__}: {exc})") from exc

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def write_route(path: Path, route: Route) -> None:
    """Publish ``route`` atomically (write beside, rename), so a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(route.to_json()) + "\n")
    temporary.replace(path)


def read_route(path: Path) -> Route:
    try:
        return Route.from_json(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise ClientError(f"cannot read the route {path}: {exc}") from exc


class Splitter:
    """The even weighted split: which of the next requests goes to the canary. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = 0

    def to_canary(self, percent: float) -> bool:
        with self._lock:
            n, self._sent = self._sent, self._sent + 1
        share = percent / 100.0
        return math.floor((n + 1) * share) > math.floor(n * share)


def canary_gone(exc: ClientError) -> bool:
    """The canary model is not loaded (any more): resend to the stable model."""
    if isinstance(exc, ServerUnavailableError):
        return True
    return isinstance(exc, InferenceError) and any(g in str(exc).lower() for g in _GONE)


class CanaryClient:
    """``detect`` like a DetectionClient, split between a stable and a canary model by a ``Route``.

    ``route`` is fixed, or ``route_file`` is re-read whenever its modification time changes (checked on each
    request: one ``stat``). ``make_client(model)`` builds the DetectionClient of one model (same URL, timeout
    and retry policy as the caller wants). ``counts`` says how many requests each model answered.
    """

    def __init__(self, make_client: Callable[[str], DetectionClient], *, route: Route | None = None,
                 route_file: Path | None = None) -> None:
        if (route is None) == (route_file is None):
            raise ValueError("give a route or a route_file, not both or neither")
        self._make, self._route, self._file = make_client, route, route_file
        self._stamp: float | None = None
        self._clients: dict[str, DetectionClient] = {}
        self._lock = threading.Lock()
        self._split = Splitter()
        self.counts: dict[str, int] = {}
        self.fallbacks = 0

    def route(self) -> Route:
        if self._file is None:
            assert self._route is not None
            return self._route
        try:
            stamp = self._file.stat().st_mtime_ns
        except OSError as exc:
            raise ClientError(f"cannot read the route {self._file}: {exc}") from exc
        if stamp != self._stamp or self._route is None:
            self._route, self._stamp = read_route(self._file), stamp
        return self._route

    def _client(self, model: str) -> DetectionClient:
        with self._lock:
            if model not in self._clients:
                self._clients[model] = self._make(model)
            return self._clients[model]

    def _answered(self, model: str) -> None:
        with self._lock:
            self.counts[model] = self.counts.get(model, 0) + 1

    def detect(self, image: ImageInput) -> DetectionResult:
        route = self.route()
        if route.canary is not None and self._split.to_canary(route.canary_percent):
            try:
                result = self._client(route.canary).detect(image)
            except ClientError as exc:
                if not canary_gone(exc):
                    raise
                logger.info("canary %s is gone (%s): sending to %s", route.canary, exc, route.stable)
                with self._lock:
                    self.fallbacks += 1
            else:
                self._answered(route.canary)
                return result
        result = self._client(route.stable).detect(image)
        self._answered(route.stable)
        return result

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def __enter__(self) -> CanaryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
