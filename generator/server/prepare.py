"""``python -m generator.server.prepare --stub-env cpu``: fetch the embedded server and make one stub environment.

What ``generator serve --prepare`` does, importing only the server's own modules: the CPU Triton image's first
stage copies just those (deploy/templates/triton-cpu.Dockerfile.j2, ``PREPARE_SOURCES``), so that slow layer (the
stub environment's pip install, minutes under arm64 emulation) is remade when the pins change, not on every edit
of the project. tests/deploy/test_prepare_sources.py checks the list against what this module imports.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from generator.cache import cache_root
from generator.server.embedded import ServerInstall, ensure_server
from generator.server.environments import STUB_ENVIRONMENTS, Environment, ensure_environment

# What the image's first stage copies for this module, relative to the repository root (folders whole).
PREPARE_SOURCES = ("generator/__init__.py", "generator/cache.py", "generator/errors.py", "generator/server",
                   "generator/serving/__init__.py", "generator/serving/contract.py")


def prepare(stub: str) -> tuple[ServerInstall, Environment]:
    """The cached server install and the ``stub`` environment, made first where missing."""
    return ensure_server(), ensure_environment(STUB_ENVIRONMENTS[stub], cache_root())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.server.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("--stub-env", choices=sorted(STUB_ENVIRONMENTS), default="cpu",
                        help="the Python backend's stub environment to make (default: cpu)")
    args = parser.parse_args(argv)
    install, environment = prepare(args.stub_env)
    print(f"Triton in {install.root}; {args.stub_env} stub environment in {environment.root}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
