"""``python -m clients.detect|stream`` without the client extra: one line that says what to install.

Running ``python -m clients.X`` imports this package first, while Python is still locating the module
(``sys.argv[0]`` is then ``"-m"``, as the ``-m`` option documents), so a missing third-party module would end in a
traceback before the command's own code runs. Only then is it turned into one line and exit 1; imported as a
library, the ImportError goes to the caller as it is. Standard library only: it runs when the rest cannot.
"""

from __future__ import annotations

import sys

_PROJECT = frozenset({"generator", "clients", "loadtest", "deploy", "tools"})


def exit_when_run_without_the_extra(exc: ModuleNotFoundError) -> None:
    """Exit 1 with the install line when ``exc`` is a missing third-party module met by ``python -m clients.X``."""
    top = (exc.name or "").split(".")[0]
    if sys.argv[:1] != ["-m"] or not top or top in _PROJECT:
        return
    argv = getattr(sys, "orig_argv", [])
    command = f"python -m {argv[argv.index('-m') + 1]}" if "-m" in argv[:-1] else "the clients"
    print(f'error: {command} needs the client extra (no module named {top!r}): pip install -e ".[client]"',
          file=sys.stderr)
    raise SystemExit(1)
