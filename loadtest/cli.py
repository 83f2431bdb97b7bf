"""``python -m loadtest``: turn argv into library calls. One module per subcommand, imported lazily.

A subcommand whose module fails to import still shows in ``--help`` and explains why when run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from .errors import LoadTestError

COMMANDS = {
    "run": ("run", "Locust load test against a running server: CSV, HTML, PNG and summary.json."),
    "perf-analyzer": ("perf_analyzer", "perf_analyzer concurrency sweep with real images (BYTES input)."),
    "bench": ("bench", "Benchmark: raw detector ceiling, ensemble over gRPC/HTTP, per-stage costs."),
}


def _load(module: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(f"loadtest.commands.{module}"), None
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description="Load tests and benchmarks for the detection ensemble.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    unavailable: dict[str, str] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        module, reason = _load(module_name)
        if module is None:
            sub.add_parser(name, help=f"{help_text} [unavailable: {reason}]", add_help=False)
            unavailable[name] = reason or "unknown import error"
            continue
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser, unavailable


def main(argv: Sequence[str] | None = None) -> int:
    parser, unavailable = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in unavailable:
        print(f"error: '{args.command}' is unavailable: {unavailable[args.command]}", file=sys.stderr)
        return 1
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args._run(args))
    except LoadTestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
