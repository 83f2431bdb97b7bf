"""The admin token on every command line: ``--admin-token`` (default: $TRITON_ADMIN_TOKEN) and ``--admin-token-file``.

One word for the secret that unlocks Triton's restricted APIs: a token (``TRITON_ADMIN_TOKEN``, the stack's
``admin-token`` secret file, ``admin_token_file`` in the JSON of ``python -m deploy up --local``). On the wire it
travels in the header deploy's ``admin_header`` setting names (``admin-key`` by default: a header name that
servers and proxies already match, kept as it is). The flags' old spellings, ``--admin-key`` and
``--admin-key-file``, still work and print a warning. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clients.errors import ClientError
from generator.serving.contract import ADMIN_TOKEN_ENV

RENAMED = {"--admin-key": "--admin-token", "--admin-key-file": "--admin-token-file"}


class _Renamed(argparse.Action):
    """An old spelling of a flag: stores like the new one, with a warning on stderr."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        if option_string in RENAMED:
            print(f"warning: {option_string} is renamed {RENAMED[option_string]} (the old name will go)",
                  file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str, *,
                  file: bool = True, env_default: bool = True) -> None:
    """``--admin-token`` (``what``: what the command needs it for) and, with ``file``, ``--admin-token-file``;
    ``env_default``: :func:`token_from` falls back on $TRITON_ADMIN_TOKEN."""
    env = f" (default: ${ADMIN_TOKEN_ENV})" if env_default else ""
    parser.add_argument("--admin-token", "--admin-key", dest="admin_token", action=_Renamed, default=None,
                        metavar="TOKEN", help=f"the admin token, {what}{env}")
    parser.set_defaults(admin_token_env=env_default)
    if file:
        parser.add_argument("--admin-token-file", "--admin-key-file", dest="admin_token_file", action=_Renamed,
                            type=Path, default=None, metavar="PATH",
                            help="read the admin token from this file (a mounted secret, or admin_token_file of "
                                 "`python -m deploy up --local`)")


def read_token_file(path: Path) -> str:
    """The admin token kept in a file (first line, whitespace stripped)."""
    try:
        lines = path.read_text(encoding="utf-8").strip().splitlines()
    except OSError as exc:
        raise ClientError(f"cannot read the admin token file {path}: {exc.strerror or exc}") from None
    if not lines or not lines[0].strip():
        raise ClientError(f"the admin token file {path} is empty")
    return lines[0].strip()


def token_from(args: argparse.Namespace) -> str | None:
    """--admin-token, else the file --admin-token-file names, else $TRITON_ADMIN_TOKEN where the command reads it."""
    if args.admin_token:
        return str(args.admin_token)
    if getattr(args, "admin_token_file", None) is not None:
        return read_token_file(args.admin_token_file)
    return os.environ.get(ADMIN_TOKEN_ENV) or None if getattr(args, "admin_token_env", False) else None
