"""Lazily imported subcommands for ``python -m generator`` and ``python -m loadtest`` (a library both command
lines use, so neither imports the other).

Each subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> int``. A module that fails to
import still shows in ``--help`` and explains why when run; a third-party module missing when it is imported or
run names the extra to install (generator/extras.py); user errors print one line and exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType

from generator.extras import install_hint


def _load(module: str, extra: str, command: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(module), None
    except ImportError as exc:
        return None, install_hint(exc, extra, command) or f"{type(exc).__name__}: {exc}"


def build_parser(prog: str, description: str, package: str, commands: Mapping[str, tuple[str, str]],
                 extras: Mapping[str, str] | None = None) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """``commands`` maps a command name to (module name in ``package``, one-line help); ``extras`` a command to
    the extra its third-party modules come with (``default``: every other command's)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    unavailable: dict[str, str] = {}
    for name, (module_name, help_text) in commands.items():
        extra = (extras or {}).get(name) or (extras or {}).get("default", "dev")
        module, reason = _load(f"{package}.{module_name}", extra, f"{prog} {name}")
        if module is None:
            sub.add_parser(name, help=f"{help_text} [unavailable: {reason}]", add_help=False)
            unavailable[name] = reason or "unknown import error"
            continue
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_run=module.run, _extra=extra)
    return parser, unavailable


class _Console(logging.Handler):
    """Library progress (INFO and up) on the current stdout, one plain line per record."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stdout, flush=True)


def show_progress(*packages: str) -> None:
    """Route the packages' log records to the console once; libraries log, commands decide where it goes."""
    for name in packages:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        if not any(isinstance(h, _Console) for h in logger.handlers):
            logger.addHandler(_Console())


def run_main(parser: argparse.ArgumentParser, unavailable: Mapping[str, str],
             user_error: type[Exception], argv: Sequence[str] | None) -> int:
    show_progress("generator", "loadtest", "clients", "deploy")
    args, rest = parser.parse_known_args(argv)
    if args.command in unavailable:
        reason = unavailable[args.command]
        print(f"error: {reason}" if reason.startswith(f"{parser.prog} ") else
              f"error: '{args.command}' is unavailable: {reason}", file=sys.stderr)
        return 1
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args._run(args))
    except user_error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # a lazily imported third-party module: which extra brings it
        hint = install_hint(exc, args._extra, f"{parser.prog} {args.command}")
        if hint is None:
            raise
        print(f"error: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
