"""``rollback``: one command back to safety: stop a canary still routed to, or else undo the last promotion."""

from __future__ import annotations

import argparse
import json

from generator.operate.rollout.arguments import add_connection_arguments, control_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from generator.operate.rollout.workflow import rollback

    record = rollback(args.model_repository, control_from_args(args), args.route_file, args.drain_s)
    print(json.dumps(record, indent=2))
    return 0
