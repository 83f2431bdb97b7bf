"""``rollout``: load the newest candidate version beside the stable one, give it a share of the traffic, compare
both on the same window, and promote or roll back by itself (generator.operate.rollout.workflow; the flags are
generator/operate/rollout/arguments.py)."""

from __future__ import annotations

import argparse

from generator.operate.rollout.arguments import add_arguments, report, settings_from_args

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    from generator.operate.rollout.workflow import rollout

    return report(rollout(settings_from_args(args)), args)
