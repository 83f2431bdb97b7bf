"""Every Triton behind one name, driven as one server: the rollout of a Kubernetes Deployment.

A headless Service resolves to the address of each ready Triton pod. The fleet loads and unloads on each of them,
reports as loaded only what every one has loaded (a pod that joined or restarted during a window loads just the
alias, so the window ends and the rollout ends safe), and sums their metrics: each sample gets a ``server`` label,
so counters, histogram buckets and request durations add up across servers (the rollout's latency evidence is its
own paired probes, through the clients' URL: rollout/probes.py). The names are resolved again on every call, so a pod that left stops being
driven; its last counters are kept, so it neither adds nor removes requests from a window.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from generator.operate.admin import ModelControl, TritonAdminError
from generator.operate.rollout.window import Scrape, parse_scrape

SERVER_LABEL = "server"
# Each server's Triton HTTP endpoint and metrics endpoint, host:port each; asked again on every call.
Servers = Callable[[], list[tuple[str, str]]]


def resolve(host: str) -> list[str]:
    """Every address ``host`` resolves to (a headless Service: one per ready pod), sorted."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TritonAdminError(f"cannot resolve the Triton servers' name {host}: {exc}") from None
    return sorted({str(info[4][0]) for info in found})


def _join(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def headless(host: str, http_port: int, metrics_port: int) -> Servers:
    """The servers behind a headless Service: every address ``host`` resolves to, on the same ports."""
    return lambda: [(_join(a, http_port), _join(a, metrics_port)) for a in resolve(host)]


def labelled(scrape: Scrape, server: str) -> Scrape:
    """``scrape`` with every sample labelled by the server it came from."""
    return {(name, tuple(sorted((*labels, (SERVER_LABEL, server))))): value
            for (name, labels), value in scrape.items()}


def merge(last: dict[str, Scrape], fresh: dict[str, Scrape]) -> Scrape:
    """One scrape of every server: ``fresh`` (server -> its scrape) over ``last``, which it updates. A server
    missing from ``fresh`` (its pod left) keeps its last samples, so its counters stop moving instead of vanishing
    from the sums (which would take its earlier requests out of a window)."""
    last.update(fresh)
    merged: Scrape = {}
    for server, scrape in last.items():
        merged.update(labelled(scrape, server))
    return merged


@dataclass
class FleetControl:
    """The ModelControl calls of the rollout, on every server ``servers`` names (e.g. ``headless(...)``)."""

    servers: Servers
    admin_key: str | None = None
    timeout_s: float = 300.0
    _last: dict[str, Scrape] = field(default_factory=dict)

    def members(self) -> list[ModelControl]:
        found = self.servers()
        if not found:
            raise TritonAdminError("no Triton server to drive (no ready pod behind the Service)")
        return [ModelControl(http, metrics, self.admin_key, self.timeout_s) for http, metrics in found]

    def load(self, model: str) -> None:
        for member in self.members():
            member.load(model)

    def unload(self, model: str) -> None:
        """Unload on every server; every server is tried before the first error is raised."""
        errors = []
        for member in self.members():
            try:
                member.unload(model)
            except TritonAdminError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def unload_loaded(self, models: Iterable[str]) -> None:
        for member in self.members():
            member.unload_loaded(models)

    def loaded(self, timeout_s: float | None = None) -> set[str]:
        """What every server has loaded (the intersection)."""
        sets = [member.loaded(timeout_s=timeout_s) for member in self.members()]
        return set.intersection(*sets)

    def samples(self) -> Scrape:
        """Every server's metrics, labelled by server; a server gone since the last call keeps its last ones."""
        fresh = {member.metrics_url: parse_scrape(member.scrape()) for member in self.members()}
        return merge(self._last, fresh)

    def infer_urls(self, clients_url: str) -> list[str]:
        """Each server's own HTTP endpoint: the clients' URL (a Service) reaches one pod of its choosing."""
        return [f"http://{member.http_url}" for member in self.members()]

    def wait_idle(self, models: Iterable[str], timeout_s: float, quiet_s: float = 1.0, poll_s: float = 0.25
                  ) -> float:
        """Each server in turn, within one budget of ``timeout_s``."""
        wanted, start = tuple(models), time.monotonic()
        for member in self.members():
            left = max(timeout_s - (time.monotonic() - start), 0.0)
            member.wait_idle(wanted, left, quiet_s, poll_s)
        return time.monotonic() - start
