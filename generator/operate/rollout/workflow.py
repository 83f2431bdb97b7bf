"""The rollout workflow: load the candidate beside the stable version, give it a share of the traffic, compare
the two on the same window, then promote or roll back by itself and write the decision record.

    load NAME_vC (explicit model control)  ->  route: C% of the clients' requests to NAME_vC
    scrape, wait --window-s, mirror the control images to both, scrape  ->  decide (decision.py)
    route: everything to NAME  ->  wait for the canary's requests in flight
    promote: alias NAME -> version C, reload NAME (Triton swaps it when ready), unload the old version
    rollback: unload NAME_vC; the alias never moved

Nothing is unloaded while requests are pending in it, and clients that still reach an unloaded canary resend to
the stable model (clients/canary.py), so neither outcome fails a request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from clients.canary import Route, write_route
from generator.operate.admin import ModelControl, TritonAdminError, TritonRefusedError
from generator.operate.rollout import state
from generator.operate.rollout.agreement import agreement
from generator.operate.rollout.decision import Decision, Thresholds, decide
from generator.operate.rollout.mirror import mirror
from generator.operate.rollout.window import SideModels, parse_scrape, side_window
from generator.repository.versions import (
    ROUTE_NAME,
    RepositoryIndex,
    VersionError,
    read_index,
    version_model,
    version_models,
)
from generator.serving.contract import step_model_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutSettings:
    repository: Path
    control: ModelControl
    infer_url: str  # where the control images go (the clients' URL, http:// or grpc://)
    control_images: tuple[bytes, ...]
    canary_percent: float = 10.0
    window_s: float = 60.0
    drain_s: float = 10.0  # the most the rollout waits for requests in flight before unloading
    candidate: int | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    route_file: Path | None = None  # default: routing.json in the repository

    @property
    def route_path(self) -> Path:
        return self.route_file or self.repository / ROUTE_NAME


def _index(repository: Path) -> RepositoryIndex:
    index = read_index(repository)
    if index is None:
        raise VersionError(f"{repository} holds no versions; build one with python -m generator build --version")
    return index


def side_models(index: RepositoryIndex, version: int, alias: bool) -> SideModels:
    ensemble = version_model(index.name, version)
    ensembles = (index.name, ensemble) if alias else (ensemble,)
    return SideModels(ensembles, step_model_name(ensemble, "nms"), step_model_name(ensemble, "preprocess"))


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _observe(settings: RolloutSettings, index: RepositoryIndex, candidate: int) -> tuple[Decision, dict[str, object]]:
    """Scrape, let the window pass, mirror the control images, scrape again, decide."""
    control = settings.control
    before, started = parse_scrape(control.scrape()), time.time()
    time.sleep(settings.window_s)
    stable_name, canary_name = index.name, version_model(index.name, candidate)
    mirrored = mirror(settings.infer_url, (stable_name, canary_name), settings.control_images)
    # The steps publish their counts once a second: wait for the last of the window to arrive.
    time.sleep(1.5)
    after, ended = parse_scrape(control.scrape()), time.time()
    stable = side_window(before, after, side_models(index, index.stable, alias=True))
    canary = side_window(before, after, side_models(index, candidate, alias=False))
    agreed = agreement(mirrored[stable_name], mirrored[canary_name]) if settings.control_images else None
    decision = decide(stable, canary, agreed, settings.thresholds)
    total = stable.requests + canary.requests
    observed = {
        "window": {"start": started, "end": ended, "seconds": round(ended - started, 3)},
        "canary_percent": settings.canary_percent,
        "observed_canary_share": round(100.0 * canary.requests / total, 2) if total else None,
        "control_images": len(settings.control_images),
        "control_agreement": agreed,
        "stable": stable.to_json(),
        "canary": canary.to_json(),
    }
    return decision, observed


def rollout(settings: RolloutSettings) -> dict[str, object]:
    """Run one rollout to its end; returns the decision record (also written beside the candidate's manifest)."""
    index = _index(settings.repository)
    candidate = settings.candidate if settings.candidate is not None else index.candidate()
    if candidate not in index.versions or candidate == index.stable:
        raise VersionError(f"version {candidate} is not a candidate (stable {index.stable}, versions "
                           f"{', '.join(map(str, index.served))})")
    control, canary_model = settings.control, version_model(index.name, candidate)
    timings: dict[str, float] = {}
    start = time.monotonic()
    try:
        control.load(canary_model)
    except TritonRefusedError as exc:
        if exc.status in (401, 403):  # the key, not the candidate: nothing was decided
            raise
        return _refused_load(settings, index, candidate, exc, start)
    timings["load_s"] = time.monotonic() - start
    write_route(settings.route_path, Route(index.name, canary_model, settings.canary_percent))
    try:
        decision, observed = _observe(settings, index, candidate)
    finally:
        write_route(settings.route_path, Route(index.name))
    timings["observe_s"] = time.monotonic() - start - timings["load_s"]
    finish = time.monotonic()
    control.wait_idle(version_models(index.name, candidate), settings.drain_s)
    record: dict[str, object] = {"stable": index.stable, "candidate": candidate, **decision.to_json(), **observed}
    if decision.action == "promote":
        _promote(settings, index, candidate, record)
    else:
        control.unload(canary_model)
        state.mark_rolled_back(settings.repository, index, candidate, _with_timings(record, timings, finish, start),
                               _stamp())
    logger.info("Rollout of version %d: %s%s", candidate, decision.action,
                f" (failed: {', '.join(c.name for c in decision.failed)})" if decision.failed else "")
    return _with_timings(record, timings, finish, start)


def _refused_load(settings: RolloutSettings, index: RepositoryIndex, candidate: int, exc: TritonAdminError,
                  start: float) -> dict[str, object]:
    """A candidate Triton will not load is rolled back before it sees a request."""
    model = version_model(index.name, candidate)
    try:
        settings.control.unload(model)  # whatever part of it did load
    except TritonAdminError:
        logger.warning("unloading the refused %s failed as well", model)
    record: dict[str, object] = {"stable": index.stable, "candidate": candidate, "action": "rollback",
                                 "failed": ["load"], "error": str(exc),
                                 "timings": {"total_s": round(time.monotonic() - start, 3)}}
    state.mark_rolled_back(settings.repository, index, candidate, record, _stamp())
    logger.info("Rollout of version %d: rollback (Triton refused to load it: %s)", candidate, exc)
    return record


def _with_timings(record: dict[str, object], timings: dict[str, float], finish: float, start: float
                  ) -> dict[str, object]:
    now = time.monotonic()
    spans = {**timings, "finish_s": now - finish, "total_s": now - start}
    record["timings"] = {k: round(v, 3) for k, v in spans.items()}
    return record


def _promote(settings: RolloutSettings, index: RepositoryIndex, candidate: int, record: dict[str, object]) -> None:
    """Move the alias, reload it (the old alias keeps serving until the new one is ready), drop the old stable."""
    old = index.stable
    state.promote(settings.repository, index, candidate, record, _stamp())
    settings.control.load(index.name)
    retire(settings.control, index.name, old, settings.drain_s)


def retire(control: ModelControl, name: str, version: int, drain_s: float) -> None:
    """Unload a version nobody routes to any more, once its requests in flight are done."""
    control.wait_idle(version_models(name, version), drain_s)
    # Each model by name: unload_dependents reaches the steps only when the version's own ensemble was loaded,
    # and the alias (which used them) has moved on.
    for model in version_models(name, version):
        control.unload(model)


def rollback(repository: Path, control: ModelControl, route_file: Path | None = None, drain_s: float = 10.0
             ) -> dict[str, object]:
    """The manual rollback: stop a canary that is still routed to, or else undo the last promotion."""
    index = _index(repository)
    route_path = route_file or repository / ROUTE_NAME
    start = time.monotonic()
    canary = _routed_canary(route_path, index)
    record: dict[str, object] = {"action": "manual_rollback", "stable": index.stable}
    if canary is not None:
        write_route(route_path, Route(index.name))
        retire(control, index.name, canary, drain_s)
        state.mark_rolled_back(repository, index, canary, {**record, "candidate": canary}, _stamp())
        record["rolled_back"] = canary
    else:
        reverted = state.revert(repository, index, {**record, "rolled_back": index.stable}, _stamp())
        control.load(version_model(index.name, reverted.stable))
        control.load(index.name)
        retire(control, index.name, index.stable, drain_s)
        record.update(rolled_back=index.stable, stable=reverted.stable)
    record["total_s"] = round(time.monotonic() - start, 3)
    return record


def _routed_canary(route_path: Path, index: RepositoryIndex) -> int | None:
    from clients.canary import read_route
    from generator.repository.versions import version_of_model

    if not route_path.is_file():
        return None
    route = read_route(route_path)
    return None if route.canary is None else version_of_model(index.name, route.canary)
