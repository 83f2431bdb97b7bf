"""``python -m deploy render|check|show``: argv in, library calls out, exit code back."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.errors import DeployError
from deploy.settings import Settings, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deploy", description="Render and check the deployment files."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, help="YAML file of setting: value overrides")
    common.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable; wins over --config)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", parents=[common], help="write .env, compose, k8s and monitoring files")
    render.add_argument(
        "--out", type=Path, default=Path(__file__).parent, help="output directory (default: deploy/)"
    )
    check = sub.add_parser(
        "check", parents=[common], help="validate a rendered tree (schemas, policy, drift)"
    )
    check.add_argument(
        "--dir", type=Path, default=Path(__file__).parent, help="rendered directory (default: deploy/)"
    )
    check.add_argument("--no-drift", action="store_true", help="skip the comparison with a fresh render")
    sub.add_parser("show", parents=[common], help="print the settings and the derived sizes")
    return parser


def _show(settings: Settings) -> None:
    from deploy import sizing

    for key, value in sorted(vars(settings).items()):
        print(f"{key} = {value!r}")
    shm = sizing.shm_breakdown(settings)
    print(f"composing_models = {', '.join(settings.composing_models)}")
    terms = " + ".join(f"{name} {size}" for name, size in shm.tensors.items())
    print(
        f"shm: per image {shm.per_item} B ({terms}) x batch {shm.max_batch} "
        f"x {shm.python_model_instances} Python instances x 2 + 64 MiB -> {shm.total_mib} MiB"
    )
    print(f"max_request_bytes (proxy body limit, --http-max-input-size) = {sizing.max_request_bytes(settings)} B")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args.config, args.assignments)
        if args.command == "render":
            from deploy.render import render_all, write_rendered

            written = write_rendered(render_all(settings), args.out)
            print(f"rendered {len(written)} files into {args.out}")
        elif args.command == "check":
            from deploy.checks import run_checks

            problems = run_checks(args.dir, settings, check_drift=not args.no_drift)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print(f"deploy check: {len(problems)} problem(s)", file=sys.stderr)
                return 1
            print("deploy check: rendered files are current, valid and hardened")
        else:
            _show(settings)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
