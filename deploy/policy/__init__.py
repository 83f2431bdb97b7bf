"""Hardening, pinning and wiring rules for the rendered files, so they cannot silently regress.

Schemas say a file is well-formed; these rules say it is safe and wired as designed: non-root, read-only,
no capabilities, admin APIs restricted, Triton reachable only through the TLS proxy whose body limit
follows the build, every pulled image pinned by digest, the repository checked before serving, the
watchdog as the probe and the supervisor, grace periods longer than the drain, /dev/shm sized from the
build's tensors. Each function returns a list of violations (empty when every rule holds).
"""

from deploy.policy.compose import compose_text_violations, compose_violations, env_violations
from deploy.policy.images import (
    DOCKERFILES,
    LOCAL_DOCKERFILES,
    dockerfile_violations,
    extras_violations,
    local_dockerfile_violations,
)
from deploy.policy.kubernetes import k8s_violations
from deploy.policy.proxy import proxy_violations

__all__ = [
    "DOCKERFILES",
    "LOCAL_DOCKERFILES",
    "compose_text_violations",
    "compose_violations",
    "dockerfile_violations",
    "env_violations",
    "extras_violations",
    "k8s_violations",
    "local_dockerfile_violations",
    "proxy_violations",
]
