"""The rollout workflow: load the candidate beside the stable version, give it a share of the traffic, compare
the two on the same window, then promote, roll back, or end undecided for lack of evidence, by itself, and write
the decision record; after a promotion, optionally watch the new stable version against the one before it and roll
back on degradation.

    load NAME_vC (explicit model control), warm it with the control images  ->  route: C% of requests to NAME_vC
    scrape, wait --window-s while the control images go to both sides in timed pairs (probes.py), scrape
    ->  decide (decision.py); undecided: observe on, up to --max-window-s, and decide over the whole period
    route: everything to NAME  ->  wait for the canary's requests in flight
    promote: alias NAME -> version C, reload NAME (Triton swaps it when ready)
    watch (--watch-s): the new stable against the old, still loaded, on the same checks -> keep it or revert
    then unload the old version (or, rolled back or undecided, NAME_vC; the alias never moved)

An undecided rollout leaves what served before it serving: the stable version, the route on the alias, the
candidate unloaded but still a candidate (its record says which evidence was short), to be tried again with a
longer window or a larger share.

Nothing is unloaded while requests are pending in it, and clients that still reach an unloaded canary resend to
the stable model (clients/canary.py), so neither outcome fails a request. The phase is kept in the repository
(progress.py): a rollout whose Triton restarted under it, or that was itself killed, ends safe, the previous
stable version serving and a decision record saying so, at once or when the next rollout starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clients.canary import Route, write_route
from clients.errors import ClientError
from generator.errors import GeneratorError
from generator.operate.admin import Control, TritonAdminError, TritonRefusedError
from generator.operate.rollout import state
from generator.operate.rollout.agreement import agreement
from generator.operate.rollout.decision import UNDECIDED, Decision, Evidence, Thresholds, decide
from generator.operate.rollout.labelled import map50
from generator.operate.rollout.mirror import mirror
from generator.operate.rollout.probes import Pair, Prober, latest_answers, offsets, subtract
from generator.operate.rollout.progress import (
    Progress,
    clear_progress,
    read_progress,
    started,
    write_progress,
)
from generator.operate.rollout.window import Scrape, SideModels, SideWindow, side_window
from generator.repository.versions import (
    ROUTE_NAME,
    RepositoryIndex,
    VersionError,
    read_index,
    read_version_manifest,
    version_model,
    version_models,
)
from generator.serving.contract import step_model_name

logger = logging.getLogger(__name__)

Publish = Callable[[Route], None]
# The Python steps publish their counters once a second: a scrape this long after requests ends includes them.
STEP_PUBLISH_S = 1.5
# What a Triton that went away (restarted, killed) or a model that vanished under the rollout looks like.
_LOST = (TritonAdminError, ClientError)


class RolloutInterrupted(GeneratorError):
    """A model the rollout compares is no longer loaded (Triton restarted, or someone unloaded it)."""


@dataclass(frozen=True)
class RolloutSettings:
    repository: Path
    control: Control
    infer_url: str  # where the control images go (the clients' URL, http:// or grpc://)
    control_images: tuple[bytes, ...]
    canary_percent: float = 10.0
    window_s: float = 60.0
    drain_s: float = 10.0  # the most the rollout waits for requests in flight before unloading
    candidate: int | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    route_file: Path | None = None  # default: routing.json in the repository
    publish: Publish | None = None  # default: write the route to route_path (the deploy stack adds the proxy's)
    watch_s: float = 0.0  # after a promotion: the new stable against the old one; 0: no watch
    poll_s: float = 1.0  # how often a window checks that what it compares is still loaded
    recover_wait_s: float = 180.0  # how long an interrupted rollout waits for Triton to answer again
    control_source: Mapping[str, object] = field(default_factory=dict)  # what the control images are (record)
    control_truth: Mapping[str, Any] | None = None  # COCO labels of control_images, in their order
    max_window_s: float | None = None  # how long a window short of evidence goes on; default 4 x its length
    probe_interval_s: float = 0.5  # one pair of timed control-image requests (one per side) this often

    @property
    def route_path(self) -> Path:
        return self.route_file or self.repository / ROUTE_NAME

    def route(self, route: Route) -> None:
        if self.publish is not None:
            self.publish(route)
        else:
            write_route(self.route_path, route)


def _index(repository: Path) -> RepositoryIndex:
    index = read_index(repository)
    if index is None:
        raise VersionError(f"{repository} holds no versions; build one with python -m generator build --version")
    return index


def side_models(index: RepositoryIndex, version: int, alias: bool) -> SideModels:
    ensemble = version_model(index.name, version)
    ensembles = (index.name, ensemble) if alias else (ensemble,)
    return SideModels(ensembles, step_model_name(ensemble, "nms"), step_model_name(ensemble, "preprocess"))


def _max_detections(repository: Path, index: RepositoryIndex, *versions: int) -> tuple[int, int]:
    first, second = (read_version_manifest(repository, index.name, v).thresholds.max_detections for v in versions)
    return first, second


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def wait_window(control: Control, models: tuple[str, ...], seconds: float, poll_s: float) -> None:
    """Let ``seconds`` pass, checking every ``poll_s`` that ``models`` are still loaded: a Triton that restarted
    (it loads only the alias) or a model unloaded by hand ends the window at once."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(poll_s, left))
        try:
            missing = sorted(set(models) - control.loaded(timeout_s=10))
        except TritonAdminError as exc:
            raise RolloutInterrupted(f"Triton stopped answering during the window: {exc}") from None
        if missing:
            raise RolloutInterrupted(f"{', '.join(missing)} no longer loaded during the window (Triton restarted, "
                                     "or it was unloaded)")


@dataclass(frozen=True)
class Sides:
    """What one window compares: the reference side (stable before a promotion, the old version after one) and
    the side under judgement, by the models their traffic enters and the names the control images go to."""

    reference: SideModels
    judged: SideModels
    reference_name: str
    judged_name: str
    loaded: tuple[str, ...]  # must stay loaded through the window
    max_detections: tuple[int, int]  # each side's --max-detections (what makes an output capped)


def _observe(settings: RolloutSettings, sides: Sides, seconds: float,
             reference: SideWindow | None = None) -> tuple[Decision, dict[str, object], SideWindow]:
    """Scrape, let the window pass with the paired probes running, scrape again, decide; while the evidence is
    short of a verdict (undecided), keep observing in steps of ``seconds``, each decision over the whole period
    from the first scrape, up to ``max_window_s``. ``reference``: judge against this earlier window instead of
    the reference side's own traffic (the watch after a promotion)."""
    control = settings.control
    limit = max(seconds, settings.max_window_s if settings.max_window_s is not None else 4 * seconds)
    models = (sides.reference_name, sides.judged_name)
    before, begun, started, looks = control.samples(), time.time(), time.monotonic(), 0
    with Prober(settings.infer_url, models, settings.control_images, settings.probe_interval_s) as prober:
        step = seconds
        while True:
            wait_window(control, sides.loaded, step, settings.poll_s)
            with prober.paused() as pairs:
                time.sleep(STEP_PUBLISH_S)  # the last of the window's counts arrive
                after, ended = control.samples(), time.time()
            looks += 1
            decision, observed, base = _judge(settings, sides, (before, after), pairs, reference)
            left = limit - (time.monotonic() - started)
            if decision.action != UNDECIDED or left < 1.0:
                break
            logger.info("not enough evidence after %.0f s (%s): observing on, up to %.0f s", ended - begun,
                        ", ".join(c.name for c in decision.unjudged), limit)
            step = min(seconds, left)
    observed["window"] = {"start": begun, "end": ended, "seconds": round(ended - begun, 3), "looks": looks,
                          "max_s": limit}
    return decision, observed, base


def _judge(settings: RolloutSettings, sides: Sides, scrapes: tuple[Scrape, Scrape], pairs: list[Pair],
           reference: SideWindow | None) -> tuple[Decision, dict[str, object], SideWindow]:
    """One decision over the scrapes' period: the users' traffic (the probes taken out) and the probes' pairs."""
    before, after = scrapes
    users = subtract(after, offsets([p.reference for p in pairs], sides.reference_name, sides.reference.nms,
                                    sides.max_detections[0]),
                     offsets([p.judged for p in pairs], sides.judged_name, sides.judged.nms, sides.max_detections[1]))
    base = reference if reference is not None else side_window(before, users, sides.reference)
    judged = side_window(before, users, sides.judged)
    agreed = labelled = None
    if pairs:
        first, second = latest_answers(pairs, len(settings.control_images))
        agreed = agreement(first, second)
        if settings.control_truth is not None:
            labelled = (map50(settings.control_truth, first), map50(settings.control_truth, second))
    evidence = Evidence(tuple((p.reference_ms, p.judged_ms) for p in pairs), agreed, labelled)
    decision = decide(base, judged, evidence, settings.thresholds)
    total = base.requests + judged.requests
    observed: dict[str, object] = {
        "control_images": len(settings.control_images),
        "control": dict(settings.control_source),
        "control_agreement": agreed,
        "control_labels_map50": None if labelled is None else {"stable": labelled[0], "canary": labelled[1]},
        "latency_pairs": len(pairs),
        "stable": base.to_json(),
        "canary": judged.to_json(),
    }
    if reference is None:
        observed.update(canary_percent=settings.canary_percent,
                        observed_canary_share=round(100.0 * judged.requests / total, 2) if total else None)
    return decision, observed, base


def rollout(settings: RolloutSettings) -> dict[str, object]:
    """Run one rollout to its end; returns the decision record (also written beside the candidate's manifest).
    A rollout left unfinished in the repository is ended safe first (``recover``)."""
    recovered = recover(settings)
    index = _index(settings.repository)
    if recovered is not None and settings.candidate is None and not _waiting(index):
        return recovered  # the interrupted rollout was the one to run: it ended safe
    candidate = settings.candidate if settings.candidate is not None else index.candidate()
    if candidate not in index.versions or candidate == index.stable:
        raise VersionError(f"version {candidate} is not a candidate (stable {index.stable}, versions "
                           f"{', '.join(map(str, index.served))})")
    progress = started(index.stable, candidate)
    write_progress(settings.repository, progress)
    start = time.monotonic()
    try:
        settings.control.load(version_model(index.name, candidate))
    except TritonRefusedError as exc:
        if exc.status in (401, 403):  # the key, not the candidate: nothing was decided
            clear_progress(settings.repository)
            raise
        return _refused_load(settings, index, candidate, exc, start)
    timings = {"load_s": time.monotonic() - start}
    try:
        record = _trial(settings, index, progress, timings, start)
    except (RolloutInterrupted, *_LOST) as exc:
        settings.route(Route(index.name))
        return _interrupted(settings, progress, exc, start)
    clear_progress(settings.repository)
    failed, short = record.get("failed") or [], record.get("insufficient") or []
    logger.info("Rollout of version %d: %s%s", candidate, record["action"],
                f" (failed: {', '.join(map(str, failed))})" if failed else  # type: ignore[call-overload]
                f" (not enough evidence: {', '.join(map(str, short))}; version {index.stable} serves, "  # type: ignore[call-overload]
                f"{candidate} stays a candidate)" if record["action"] == UNDECIDED else "")
    return record


def _waiting(index: RepositoryIndex) -> bool:
    try:
        index.candidate()
    except VersionError:
        return False
    return True


def warm_up(settings: RolloutSettings, model: str) -> None:
    """The control images through the freshly loaded candidate once, before any user request is routed to it: a
    new stub's and a new detector session's first calls are several times slower (141 ms against 25 ms measured
    on the demo), and the users queued behind them would be the tail the window's p95 judges. A candidate that
    fails here fails before users see it (a client error ends the rollout safe, as in the window). A fleet warms
    every server: behind a Service the clients' URL would reach one pod, and the others' users would meet it cold."""
    if settings.control_images:
        for url in settings.control.infer_urls(settings.infer_url):
            mirror(url, (model,), settings.control_images)
        time.sleep(STEP_PUBLISH_S)  # its counts land before the window's first scrape: in neither side


def _trial(settings: RolloutSettings, index: RepositoryIndex, progress: Progress, timings: dict[str, float],
           start: float) -> dict[str, object]:
    """The canary's window and what follows from it: promotion (and its watch) or rollback."""
    control, candidate = settings.control, progress.candidate
    canary_model = version_model(index.name, candidate)
    warm_up(settings, canary_model)
    timings["warmup_s"] = time.monotonic() - start - timings["load_s"]
    settings.route(Route(index.name, canary_model, settings.canary_percent))
    sides = Sides(side_models(index, index.stable, alias=True), side_models(index, candidate, alias=False),
                  index.name, canary_model, (index.name, canary_model),
                  _max_detections(settings.repository, index, index.stable, candidate))
    try:
        decision, observed, baseline = _observe(settings, sides, settings.window_s)
    finally:
        settings.route(Route(index.name))
    timings["observe_s"] = time.monotonic() - start - timings["load_s"] - timings["warmup_s"]
    finish = time.monotonic()
    control.wait_idle(version_models(index.name, candidate), settings.drain_s)
    record: dict[str, object] = {"stable": index.stable, "candidate": candidate, **decision.to_json(), **observed}
    if decision.action != "promote":
        _unload(control, version_models(index.name, candidate))
        timed = _with_timings(record, timings, finish, start)
        if decision.action == UNDECIDED:  # not judged: it stays a candidate, to be tried again with more traffic
            state.note(settings.repository, index, candidate, timed, _stamp())
        else:
            state.mark_rolled_back(settings.repository, index, candidate, timed, _stamp())
        return record
    if settings.watch_s > 0:  # the old version's own ensemble keeps its steps loaded once the alias moves on
        control.load(version_model(index.name, index.stable))
    _promote(settings, index, candidate, record, progress)
    watch = _watch(settings, progress, baseline) if settings.watch_s > 0 else None
    if watch is not None:
        record["watch"] = watch
        if watch["action"] == "rollback":
            record["action"] = "rollback_after_promotion"
    retire(control, index.name, index.stable if record["action"] == "promote" else candidate, settings.drain_s)
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
    clear_progress(settings.repository)
    logger.info("Rollout of version %d: rollback (Triton refused to load it: %s)", candidate, exc)
    return record


def _with_timings(record: dict[str, object], timings: dict[str, float], finish: float, start: float
                  ) -> dict[str, object]:
    now = time.monotonic()
    spans = {**timings, "finish_s": now - finish, "total_s": now - start}
    record["timings"] = {k: round(v, 3) for k, v in spans.items()}
    return record


def _promote(settings: RolloutSettings, index: RepositoryIndex, candidate: int, record: dict[str, object],
             progress: Progress) -> None:
    """Move the alias and reload it (the old alias keeps serving until the new one is ready). The old version
    stays loaded: the watch compares with it, and a rollback after the promotion needs no load."""
    write_progress(settings.repository, progress.at("promoting"))
    state.promote(settings.repository, index, candidate, record, _stamp())
    settings.control.load(index.name)


def _watch(settings: RolloutSettings, progress: Progress, baseline: SideWindow) -> dict[str, object]:
    """The new stable version (all the traffic) against the window the old one had before the promotion, on
    the same checks; the control images go to both (the old one is still loaded). Degraded or interrupted: the
    alias goes back to the old version, with a record beside the new one (an interruption: ``recover``)."""
    write_progress(settings.repository, progress.at("watching"))
    index = _index(settings.repository)
    old, new = version_model(index.name, progress.stable), version_model(index.name, progress.candidate)
    sides = Sides(side_models(index, progress.stable, alias=False), side_models(index, progress.candidate, True),
                  old, index.name, (index.name, old),
                  _max_detections(settings.repository, index, progress.stable, progress.candidate))
    decision, observed, _ = _observe(settings, sides, settings.watch_s, reference=baseline)
    watched = {**decision.to_json(), **observed, "compared": f"{new} after the promotion against {old} before it"}
    if decision.action != "rollback":  # undecided: the promotion was decided on evidence, and nothing says worse
        state.note(settings.repository, index, progress.candidate, {"watch": watched}, _stamp())
        if decision.action == UNDECIDED:
            logger.warning("Watch of version %d: not enough evidence to judge (%s); the promotion stands",
                           progress.candidate, ", ".join(c.name for c in decision.unjudged))
        return {**watched, "action": "keep" if decision.action == "promote" else "keep_undecided"}
    _revert(settings, index, progress.candidate, {"action": "rollback_after_promotion", "watch": watched})
    logger.info("Watch of version %d: degraded (failed: %s); version %d serves again", progress.candidate,
                ", ".join(c.name for c in decision.failed), progress.stable)
    return {**watched, "action": "rollback"}


def _revert(settings: RolloutSettings, index: RepositoryIndex, version: int, record: dict[str, object]) -> None:
    """The alias back to the version stable before ``version`` (loaded again if a restart dropped it)."""
    reverted = state.revert(settings.repository, index, {**record, "rolled_back": version}, _stamp())
    settings.control.load(version_model(index.name, reverted.stable))
    settings.control.load(index.name)


def _unload(control: Control, models: tuple[str, ...]) -> None:
    """Unload each of ``models`` that is loaded (after a restart some are not), on every server driven."""
    control.unload_loaded(models)


def retire(control: Control, name: str, version: int, drain_s: float) -> None:
    """Unload a version nobody routes to any more, once its requests in flight are done."""
    control.wait_idle(version_models(name, version), drain_s)
    # Each model by name: unload_dependents reaches the steps only when the version's own ensemble was loaded,
    # and the alias (which used them) has moved on.
    _unload(control, version_models(name, version))


def _wait_for_triton(control: Control, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            control.loaded(timeout_s=10)
            return
        except TritonAdminError:
            if time.monotonic() > end:
                raise
            time.sleep(1.0)


def _interrupted(settings: RolloutSettings, progress: Progress, exc: Exception, start: float) -> dict[str, object]:
    """The window could not finish: end safe now (Triton may still be restarting: wait for it)."""
    logger.warning("Rollout of version %d interrupted: %s", progress.candidate, exc)
    _wait_for_triton(settings.control, settings.recover_wait_s)
    record = recover(settings, reason=f"{type(exc).__name__}: {exc}") or {}
    record.setdefault("timings", {"total_s": round(time.monotonic() - start, 3)})
    return record


def recover(settings: RolloutSettings, reason: str | None = None) -> dict[str, object] | None:
    """End a rollout left unfinished in the repository (``rollout.json``), safe: the version stable before it
    serves, the route on the alias, the candidate unloaded and marked rolled back, the decision recorded."""
    progress = read_progress(settings.repository)
    if progress is None:
        return None
    index = _index(settings.repository)
    name, candidate = index.name, progress.candidate
    settings.route(Route(name))
    record: dict[str, object] = {
        "stable": progress.stable, "candidate": candidate, "action": "rollback", "failed": ["interrupted"],
        "phase": progress.phase, "error": reason or "the rollout stopped before its decision was carried out "
        "(its process or container was stopped); found by the next rollout"}
    if index.stable == candidate:  # promoted, not yet watched to the end: the one before it serves again
        _revert(settings, index, candidate, record)
        retire(settings.control, name, candidate, settings.drain_s)
    elif candidate in index.versions and index.versions[candidate].state == "candidate":
        _unload(settings.control, version_models(name, candidate))
        state.mark_rolled_back(settings.repository, index, candidate, record, _stamp())
    clear_progress(settings.repository)
    logger.info("Rollout of version %d ended safe after an interruption (%s); version %d serves", candidate,
                progress.phase, progress.stable)
    return record


def rollback(repository: Path, control: Control, route_file: Path | None = None, drain_s: float = 10.0,
             publish: Publish | None = None) -> dict[str, object]:
    """The manual rollback: stop a canary that is still routed to, or else undo the last promotion."""
    index = _index(repository)
    route_path = route_file or repository / ROUTE_NAME
    route = publish or (lambda r: write_route(route_path, r))
    start = time.monotonic()
    canary = _routed_canary(route_path, index)
    record: dict[str, object] = {"action": "manual_rollback", "stable": index.stable}
    if canary is not None:
        route(Route(index.name))
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
