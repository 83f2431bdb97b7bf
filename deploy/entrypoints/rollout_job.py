"""The rollout's one-shot container (compose service ``rollout``/``rollout-cpu``): ``generator rollout`` against
the stack's Triton, with the split published for the proxy as well as for the clients.

    python3 -m deploy.entrypoints.rollout_job --model-repository=/models/current --url=127.0.0.1:8000 \\
        --metrics-url=127.0.0.1:8002 --infer-url=grpc://127.0.0.1:8001 --admin-token-file=/run/secrets/admin_token \\
        --routing-dir=/models/routing [generator rollout flags: --window-s, --control-images, ...] [--rollback]

On Kubernetes (``--fleet``, the Job deploy/k8s/rollout-job.yaml) it drives every Triton pod behind the headless
Service (generator/operate/fleet.py) over the pods' network, admitted by the NetworkPolicy from its own pods only.
In compose it runs in the pod's network namespace (Triton's admin API and metrics on its loopback, never through the public
proxy), reads the admin token from a secret file, and keeps its phase in the volume (``rollout.json``): started
again after it was killed, it first ends the interrupted rollout safe. Exit 0: promoted; 3: rolled back (by its
checks, its watch, an interruption, or ``--rollback``); 4: undecided, not enough traffic for a verdict (the stable
version serves, the candidate stays one); 1: an error, one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from generator.errors import GeneratorError

if TYPE_CHECKING:
    from generator.operate.fleet import FleetControl


def _parser() -> argparse.ArgumentParser:
    from generator.operate.rollout import arguments as rollout_cli

    parser = argparse.ArgumentParser(prog="python -m deploy.entrypoints.rollout_job", description=__doc__.splitlines()[0])
    rollout_cli.add_arguments(parser)
    parser.add_argument("--routing-dir", type=Path, required=True,
                        help="where the proxy and the clients read the split (deploy/entrypoints/routing.py)")
    parser.add_argument("--fleet", default=None, metavar="HOST",
                        help="drive every Triton HOST resolves to (a headless Service), on the ports of --url and "
                             "--metrics-url: load, metrics summed, promote and roll back on each")
    parser.add_argument("--rollback", action="store_true",
                        help="instead of a rollout: stop a canary still routed to, or undo the last promotion")
    return parser


def _port(url: str, flag: str) -> int:
    host, _, port = url.removeprefix("http://").rpartition(":")
    if not host or not port.isdigit():
        raise GeneratorError(f"{flag} {url!r} must be HOST:PORT")
    return int(port)


def fleet_control(args: argparse.Namespace) -> FleetControl:
    """--fleet: every server the name resolves to, on the ports --url and --metrics-url give."""
    from generator.operate.fleet import FleetControl, headless
    from generator.operate.rollout import arguments as rollout_cli

    servers = headless(args.fleet, _port(args.url, "--url"), _port(args.metrics_url, "--metrics-url"))
    return FleetControl(servers, rollout_cli.admin_token_of(args))


def main(argv: Sequence[str] | None = None) -> int:
    from generator.operate.rollout import arguments as rollout_cli

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="rollout: %(message)s", stream=sys.stderr)
    try:
        from deploy.entrypoints.routing import ROUTE_FILE, publish
        from generator.operate.rollout.workflow import rollback, rollout

        to_proxy = partial(publish, args.routing_dir)
        args.route_file = args.routing_dir / ROUTE_FILE
        control = fleet_control(args) if args.fleet else rollout_cli.control_from_args(args)
        if args.rollback:
            record = rollback(args.model_repository, control, args.route_file, args.drain_s, publish=to_proxy)
            return rollout_cli.report(record, args)
        settings = rollout_cli.settings_from_args(args, control, publish=to_proxy)
        return rollout_cli.report(rollout(settings), args)
    except (GeneratorError, OSError) as exc:
        print(f"rollout: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
