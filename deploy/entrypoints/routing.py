"""The rollout's split, published where the proxy and the clients read it, with no reload of anything.

    ROUTING/routing.json             the route for the project's clients (clients/canary.py; gRPC splits there)
    ROUTING/canary -> .split-<n>/M   M: the model the canary share goes to; in it one empty file per bucket sent
                                     there ("0" .. "P-1" for P percent)

The proxy (proxy/nginx.conf) gives every HTTP inference request for the alias a bucket, 0..99, from its request id
(``split_clients``); when ``canary/<bucket>`` exists the request goes to the model the link's real path ends in
(nginx's ``$realpath_root``, resolved per request). A new split is a new folder and one ``rename(2)`` of the link,
so nginx sees the old split or the new one, never half of either, and the proxy never reloads: HTTP keep-alive
and gRPC connections stay up through a whole rollout.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from clients.canary import Route, write_route
from deploy.commands import CANARY_BUCKETS as BUCKETS

ROUTE_FILE = "routing.json"
CANARY_LINK = "canary"
SPLIT_PREFIX = ".split-"


def buckets(route: Route) -> int:
    """How many of the proxy's 100 buckets go to the canary: its share, rounded to whole percent (at least one
    for any share above 0)."""
    if route.canary is None or route.canary_percent <= 0:
        return 0
    return min(BUCKETS, max(1, round(route.canary_percent)))


def publish(routing: Path, route: Route) -> None:
    """Point the proxy's split and the clients' route at ``route``; old splits are removed."""
    routing.mkdir(parents=True, exist_ok=True)
    share = buckets(route)
    stamp = f"{SPLIT_PREFIX}{time.time_ns()}"
    folder = routing / stamp / (route.canary if share and route.canary else route.stable)
    folder.mkdir(parents=True)
    for bucket in range(share):
        (folder / str(bucket)).touch()
    staged = routing / f".{CANARY_LINK}.tmp-{os.getpid()}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(folder.relative_to(routing))
    if share:  # the clients' route first when the canary starts, last when it stops
        write_route(routing / ROUTE_FILE, route)
        staged.replace(routing / CANARY_LINK)
    else:
        staged.replace(routing / CANARY_LINK)
        write_route(routing / ROUTE_FILE, route)
    for old in routing.glob(f"{SPLIT_PREFIX}*"):
        if old.name != stamp:
            shutil.rmtree(old, ignore_errors=True)


def published_share(routing: Path) -> tuple[str | None, int]:
    """What the proxy reads now: the model the canary buckets go to and how many buckets (tests, diagnostics)."""
    link = routing / CANARY_LINK
    if not link.is_symlink() or not link.is_dir():
        return None, 0
    count = sum(1 for p in link.iterdir() if p.name.isdigit())
    return link.resolve().name, count
