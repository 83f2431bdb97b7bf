"""How long a graceful stop may take, as data for ``generator serve``, the watchdog and the deploy files.

On SIGTERM, Triton 2.51 first refuses new HTTP connections and waits for open ones, then stops the model
schedulers (new requests get UNAVAILABLE) and waits for the inferences in flight; both phases share one
budget, ``--exit-timeout-secs``, after which it exits anyway (server: src/main.cc, core: src/server.cc).
An idle keep-alive HTTP connection holds the first phase for the whole budget (measured on 2.51), so the
budget is what a stop costs, not only what a slow request may use. Each layer above waits a little longer
than the one below, so the innermost always gets to finish its drain:

    tritonserver --exit-timeout-secs  <  watchdog --grace-s  <  compose stop_grace_period /
                                                                 Kubernetes terminationGracePeriodSeconds
"""

from __future__ import annotations

from dataclasses import dataclass

# In-flight requests get this long after SIGTERM (Triton's own default).
EXIT_TIMEOUT_S = 30
# After the drain: unloading the models and stopping the Python-backend stubs (about 1 s measured here).
TEARDOWN_S = 10
# Between the watchdog's SIGKILL and the container runtime's.
RUNTIME_MARGIN_S = 5


@dataclass(frozen=True)
class StopTiming:
    """The three nested grace periods of a stop, derived from tritonserver's drain budget."""

    exit_timeout_s: int = EXIT_TIMEOUT_S

    def __post_init__(self) -> None:
        if not 1 <= self.exit_timeout_s <= 3600:
            raise ValueError(f"exit_timeout_s must be 1..3600 seconds, got {self.exit_timeout_s}")

    @property
    def watchdog_grace_s(self) -> int:
        """``watchdog.py supervise --grace-s``: SIGTERM to SIGKILL of tritonserver."""
        return self.exit_timeout_s + TEARDOWN_S

    @property
    def container_grace_s(self) -> int:
        """compose ``stop_grace_period`` and Kubernetes ``terminationGracePeriodSeconds``."""
        return self.watchdog_grace_s + RUNTIME_MARGIN_S

    def server_args(self) -> list[str]:
        return [f"--exit-timeout-secs={self.exit_timeout_s}"]
