"""``python -m generator``: turn argv into library calls, one lazily imported module per subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from generator.errors import GeneratorError
from generator.subcommands import build_parser as _build_parser
from generator.subcommands import run_main

COMMANDS = {
    "build": ("build", "Build a Triton model repository (ensemble) from a YOLO ONNX."),
    "serve": ("serve", "Run the embedded Triton server on loopback for a model repository."),
    "check": ("check", "Compare a repository's manifest with this machine (TensorRT, GPU, file hashes)."),
    "plan": ("plan", "Build the TensorRT plan of a --defer-plan repository on this GPU host."),
    "selftest": ("selftest", "GPU host: build the demo as an FP16 plan, serve it, compare with the FP32 reference."),
    "rollout": ("rollout", "Try the newest version on a share of the traffic; promote or roll back by itself."),
    "rollback": ("rollback", "Stop a canary, or move the alias back to the previous stable version."),
    "validate": ("validate", "Accuracy gate: compare a built repository with the FP32 reference (mAP)."),
    "archive": ("archive", "Write what the embedded server needs for a machine with no package index (offline)."),
}

# The extra each command's third-party modules come with (pyproject.toml); named when one is missing.
EXTRAS = {"default": "build", "rollout": "rollout", "rollback": "rollout"}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    return _build_parser("python -m generator", "Build, serve, check and validate Triton detection ensembles.",
                         "generator.cli", COMMANDS, EXTRAS)


def main(argv: Sequence[str] | None = None) -> int:
    parser, unavailable = build_parser()
    return run_main(parser, unavailable, GeneratorError, argv)
