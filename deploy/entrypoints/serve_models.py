"""The Triton container's command: verify the repository, then serve it under the watchdog.

    python3 -m deploy.entrypoints.serve_models --repository /models/current --watchdog /opt/deploy/watchdog.py \\
        --url 127.0.0.1:8000 --model yolo --failures 3 --interval-s 10 --timeout-s 5 --grace-s 40 \\
        --watchdog-metrics-port 8003 --watchdog-state /tmp/watchdog/state.json \
        [--restart-on stub_exited,dead_stub --restart-grace-s 5] -- tritonserver ARGS...

1. ``generator check`` of REPOSITORY in this image (in-process, deploy/entrypoints/repository_check.py): files against the
   manifest and, for a TensorRT plan, the plan against this image's libnvinfer and GPUs. A repository that
   would not load stops here
   with the check's own reason and exit code 1 (compose restarts with back-off, Kubernetes shows
   CrashLoopBackOff and the reason in the log) instead of a server that fails at load time.
2. The flags the repository itself needs, which the same check returns (as ``--server-flags`` prints them: a
   version-compatible plan needs ``--backend-config=tensorrt,version-compatible=true``), are appended to
   the tritonserver command.
3. This process becomes ``watchdog.py supervise ... -- tritonserver ...`` (exec, same PID): SIGTERM drains
   the server, N failed probes in a row stop it and exit 1, so the restart policy starts a fresh one. The
   reasons given to ``--restart-on`` (a lost Python-backend stub) restart tritonserver in place instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


class ServeError(Exception):
    """The repository cannot be served here; the message says why."""


def checked_flags(repository: Path) -> list[str]:
    """``generator check``: the verdict and its reasons (stderr), then the tritonserver flags the repository needs,
    from one run of the check (deploy/entrypoints/repository_check.py)."""
    from deploy.entrypoints.repository_check import checked

    result = checked(repository)
    if result is None or not result.ok:
        found = "not a build" if result is None else f"{len(result.mismatches)} mismatch(es)"
        raise ServeError(f"generator check refused {repository} ({found}); not starting Triton")
    return list(result.server_flags)


def supervise_argv(args: argparse.Namespace, server: Sequence[str], extra_flags: Sequence[str]) -> list[str]:
    """The watchdog's command line: probe settings, then ``--`` and the server command with its extra flags."""
    return [
        sys.executable, str(args.watchdog), "supervise",
        "--url", args.url,
        "--model", args.model,
        "--failures", str(args.failures),
        "--interval-s", str(args.interval_s),
        "--timeout-s", str(args.timeout_s),
        "--grace-s", str(args.grace_s),
        *(["--metrics-port", str(args.watchdog_metrics_port), "--metrics-address", args.watchdog_metrics_address]
          if args.watchdog_metrics_port else []),
        *(["--state-file", str(args.watchdog_state)] if args.watchdog_state else []),
        *(["--restart-on", args.restart_on] if args.restart_on else []),
        *(["--restart-grace-s", str(args.restart_grace_s)] if args.restart_grace_s is not None else []),
        # Explicit model control: a rollout loads and unloads versions, whose stubs come and go.
        *(["--explicit"] if "--model-control-mode=explicit" in server else []),
        "--",
        *server,
        *extra_flags,
    ]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy.entrypoints.serve_models", description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, required=True, help="the model repository tritonserver loads")
    parser.add_argument("--watchdog", type=Path, required=True, help="path of watchdog.py in this image")
    parser.add_argument("--url", required=True, help="Triton HTTP HOST:PORT the probes use")
    parser.add_argument("--model", required=True, help="ensemble the probes run")
    parser.add_argument("--failures", type=int, required=True, help="failed probes in a row before a restart")
    parser.add_argument("--interval-s", type=float, required=True, help="between probes")
    parser.add_argument("--timeout-s", type=float, required=True, help="one probe")
    parser.add_argument("--grace-s", type=float, required=True, help="SIGTERM to SIGKILL of tritonserver")
    parser.add_argument("--watchdog-metrics-port", type=int, default=0,
                        help="the watchdog's Prometheus endpoint (restarts by reason); 0: off")
    parser.add_argument("--watchdog-metrics-address", default="0.0.0.0",
                        help="address of the watchdog's endpoint (every interface of the container, like Triton's metrics)")
    parser.add_argument("--watchdog-state", type=Path, help="file that keeps the watchdog's counters across restarts")
    parser.add_argument("--restart-on", default="",
                        help="reasons the watchdog restarts tritonserver in place for (comma-separated)")
    parser.add_argument("--restart-grace-s", type=float, help="SIGTERM to SIGKILL of an unhealthy tritonserver")
    parser.add_argument("server", nargs=argparse.REMAINDER, help="-- tritonserver ARGS...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    server = args.server[1:] if args.server[:1] == ["--"] else args.server
    try:
        if not server:
            raise ServeError("no server command: put it after --, e.g. -- tritonserver --model-repository=...")
        if not args.watchdog.is_file():
            raise ServeError(f"watchdog {args.watchdog} not found; the Triton image copies it there")
        argv_out = supervise_argv(args, server, checked_flags(args.repository))
    except ServeError as exc:
        print(f"serve_models: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv_out[0], argv_out)
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
