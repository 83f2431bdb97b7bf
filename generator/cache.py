"""The project's cache folder: the embedded server, its locked environments, Triton 2.51's config schema, TensorRT
timing caches. ``$TRITON_DETECTION_CACHE``, else ``~/.cache/triton-detection-ensemble``.

Standard library only, on the lowest floor: the server, the builder and the load tests each read it here instead
of through one another.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TRITON_DETECTION_CACHE"


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "triton-detection-ensemble"
