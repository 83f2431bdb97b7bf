"""The rollout's one-shot container (compose service ``rollout``/``rollout-cpu``): ``generator rollout`` against
the stack's Triton, with the split published for the proxy as well as for the clients.

    python3 -m deploy.rollout_job --model-repository=/models/current --url=127.0.0.1:8000 \\
        --metrics-url=127.0.0.1:8002 --infer-url=grpc://127.0.0.1:8001 --admin-key-file=/run/secrets/admin_token \\
        --routing-dir=/models/routing [generator rollout flags: --window-s, --control-images, ...] [--rollback]

It runs in the pod's network namespace (Triton's admin API and metrics on its loopback, never through the public
proxy), reads the admin token from a secret file, and keeps its phase in the volume (``rollout.json``): started
again after it was killed, it first ends the interrupted rollout safe. Exit 0: promoted; 3: rolled back (by its
checks, its watch, an interruption, or ``--rollback``); 1: an error, one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from generator.errors import GeneratorError


def _parser() -> argparse.ArgumentParser:
    from generator.cli import rollout as rollout_cli

    parser = argparse.ArgumentParser(prog="python -m deploy.rollout_job", description=__doc__.splitlines()[0])
    rollout_cli.add_arguments(parser)
    parser.add_argument("--routing-dir", type=Path, required=True,
                        help="where the proxy and the clients read the split (deploy/routing.py)")
    parser.add_argument("--rollback", action="store_true",
                        help="instead of a rollout: stop a canary still routed to, or undo the last promotion")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from generator.cli import rollout as rollout_cli

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="rollout: %(message)s", stream=sys.stderr)
    try:
        from deploy.routing import ROUTE_FILE, publish
        from generator.operate.rollout.workflow import rollback, rollout

        to_proxy = partial(publish, args.routing_dir)
        args.route_file = args.routing_dir / ROUTE_FILE
        if args.rollback:
            record = rollback(args.model_repository, rollout_cli.control_from_args(args), args.route_file,
                              args.drain_s, publish=to_proxy)
            return rollout_cli.report(record, args)
        settings = rollout_cli.settings_from_args(args, publish=to_proxy)
        return rollout_cli.report(rollout(settings), args)
    except (GeneratorError, OSError) as exc:
        print(f"rollout: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
