"""Which extra to install when a command meets a third-party module that is not there.

The base install is numpy alone; each command's packages come with an extra (pyproject.toml). A command that
imports one it lacks says which extra brings it, in one line, instead of a traceback.
"""

from __future__ import annotations

PROJECT_PACKAGES = frozenset({"generator", "clients", "loadtest", "deploy", "tools"})


def missing_module(exc: ImportError) -> str | None:
    """The top-level name of the third-party module ``exc`` did not find; None when it is anything else (a module of
    this project, or a name missing from a module that is there: a real bug, which keeps its traceback)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    return None if top in PROJECT_PACKAGES else top


def install_hint(exc: ImportError, extra: str, command: str) -> str | None:
    """``command needs the EXTRA extra (no module named 'x'): pip install -e ".[EXTRA]"``, or None (see
    :func:`missing_module`)."""
    module = missing_module(exc)
    if module is None:
        return None
    names = extra.split(",")
    which = f"the {names[0]} extra" if len(names) == 1 else f"the {' and '.join(names)} extras"
    return f'{command} needs {which} (no module named {module!r}): pip install -e ".[{extra}]"'
