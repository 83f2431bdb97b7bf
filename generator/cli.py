"""``python -m generator``: turn argv into library calls. One module per subcommand, imported lazily.

A subcommand whose module fails to import still shows in ``--help`` and explains why when run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from .errors import GeneratorError

COMMANDS = {
    "build": "Build a Triton model repository (ensemble) from a YOLO ONNX.",
    "serve": "Run the embedded Triton server on loopback for a model repository.",
    "check": "Compare a repository's manifest with this machine (TensorRT, GPU, file hashes).",
    "validate": "Accuracy gate: compare a built repository with the FP32 reference (mAP).",
}


def _load(name: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(f"generator.commands.{name}"), None
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    parser = argparse.ArgumentParser(prog="python -m generator", description="Build, serve, check and validate Triton detection ensembles.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    unavailable: dict[str, str] = {}
    for name, help_text in COMMANDS.items():
        module, reason = _load(name)
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
    except GeneratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
