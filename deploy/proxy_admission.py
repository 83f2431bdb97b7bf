"""The proxy's in-flight limit: the served build's ``max_in_flight`` as an nginx snippet in the models volume.

Triton 2.51 bounds each composing step's queue but not an ensemble as a whole, so under overload an accepted
request could wait in three queues, and a request refused by the detector's full queue had already been
preprocessed (issue 37: rejections p99 1.5 s, accepted p95 2.2 s against a 974 ms budget). The proxy counts the
inference requests in progress, HTTP and gRPC together (nginx's ``limit_conn`` counts each HTTP/2 stream as a
connection), and refuses the one above the limit before reading its body: 429 with ``Retry-After`` over HTTP,
RESOURCE_EXHAUSTED over gRPC (deploy/templates/proxy/nginx.conf.j2, the "Admission" blocks).

The limit comes from the build (generator/builder/stages/admission.py ``in_flight_limit``: measured service time
and the budget), which the proxy cannot know when its config is rendered, so the builder writes it beside the
repository and nginx.conf includes it by a pattern: with no snippet (a volume built before this existed) the
proxy starts without the limit and Triton's queues still shed. The proxy starts after the builder (compose
``depends_on``; Kubernetes' build Job fills the volume first) and reads it again on reload.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

SNIPPET = "proxy-admission.conf"
# What nginx.conf includes: a pattern matches nothing without an error, a plain path would stop nginx.
INCLUDE_PATTERN = "proxy-admission*.conf"
ZONE = "admission"


def snippet(max_in_flight: int, manifest: Path) -> str:
    """The nginx lines for ``max_in_flight`` requests in progress, saying where the number came from."""
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
    return (f"# Written by deploy/build_models.py from {manifest.parent.name}/{manifest.name} (admission."
            f"max_in_flight): inference requests in progress, HTTP and gRPC together.\n"
            f"limit_conn {ZONE} {max_in_flight};\n")


def max_in_flight(manifest: Path) -> int | None:
    """The build's recorded in-flight limit, or None for a manifest written before it existed."""
    admission = json.loads(manifest.read_text()).get("admission") or {}
    value = admission.get("max_in_flight")
    return int(value) if value is not None else None


def write(volume: Path, manifest: Path) -> int | None:
    """Write (atomically) or remove ``volume/SNIPPET`` for the build ``manifest`` describes; returns the limit."""
    target = volume / SNIPPET
    limit = max_in_flight(manifest)
    if limit is None:
        target.unlink(missing_ok=True)
        logger.warning("%s records no max_in_flight: the proxy admits without an in-flight limit", manifest)
        return None
    staged = volume / f".{SNIPPET}.tmp"
    staged.write_text(snippet(limit, manifest))
    staged.chmod(0o644)  # the proxy runs as another user
    staged.replace(target)
    logger.info("proxy in-flight limit: %d requests (%s)", limit, target)
    return limit


# Retry-After in whole seconds (HTTP's unit): the derived budget is about a second, and a refused client that
# comes back sooner only meets the same full pipeline.
RETRY_AFTER_S = 1
# The proxy's one 429 answer, also for the front door's per-client connection limit (deploy/screening.py).
BUSY_MESSAGE = (f"server busy: the inference requests in progress are at the limit this build serves within its "
                f"latency budget, or this client holds too many connections; retry after {RETRY_AFTER_S} s")


def template_context() -> dict[str, object]:
    """What nginx.conf.j2's admission blocks use."""
    return {"admission_zone": ZONE, "admission_include": INCLUDE_PATTERN,
            "admission_retry_after_s": RETRY_AFTER_S, "admission_busy": BUSY_MESSAGE}
