"""Make the installed ``tensorrt-stubs`` usable by mypy: ``python .ci/stubs_for_mypy.py DIR`` (a CI helper).

The stubs as published (10.8 to 10.13) cannot type-check anything: the ``tensorrt`` folder has no
``py.typed``, so mypy skips it (and ``ignore_missing_imports`` turns every TensorRT type into
``Any``), and the generated ``tensorrt.pyi`` has syntax errors (parameters named ``in``, a
required parameter after defaulted ones). This copies them to ``DIR`` with those lines repaired;
then ``MYPYPATH=DIR mypy generator/builder/stages/tensorrt`` checks the code against the real API.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import re
import shutil
import sys
from pathlib import Path

_PACKAGES = ("tensorrt", "tensorrt_bindings")
_KEYWORD_PARAM = re.compile(r"(?<=[(,\s])in(?=\s*:)")


def _stub_root() -> Path:
    try:
        files = importlib.metadata.files("tensorrt-stubs") or []
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit("tensorrt-stubs is not installed: pip install --no-deps tensorrt-stubs") from None
    for entry in files:
        if entry.name == "__init__.pyi" and entry.parts[0] == "tensorrt":
            return Path(str(entry.locate())).parent.parent
    raise SystemExit("tensorrt-stubs has no tensorrt/__init__.pyi")


def _fix_line(line: str) -> str:
    line = _KEYWORD_PARAM.sub("in_", line)
    match = re.match(r"^(\s*def \w+\()(.*)(\)\s*->.*)$", line)
    if not match:
        return line
    head, params, tail = match.groups()
    fixed, seen_default = [], False
    for param in _split_params(params):
        if "=" in param:
            seen_default = True
        elif seen_default and not param.strip().startswith("*"):
            param = f"{param} = ..."
        fixed.append(param)
    return head + ",".join(fixed) + tail


def _split_params(params: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in params:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return parts


def repair(source: str, label: str) -> str:
    """Fix every ``def`` line that does not parse on its own, then check the whole file parses."""
    lines = source.splitlines(keepends=True)
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("def ") and not _parses(f"{stripped} ..."):
            lines[index] = _fix_line(line.rstrip("\n")) + "\n"
            if not _parses(f"{lines[index].strip()} ..."):
                raise SystemExit(f"{label}:{index + 1}: cannot repair: {stripped}")
    repaired = "".join(lines)
    try:
        ast.parse(repaired)
    except SyntaxError as exc:
        raise SystemExit(f"{label}:{exc.lineno}: still invalid after repair: {exc.msg}") from exc
    return repaired


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def write_stubs(target: Path) -> list[Path]:
    root = _stub_root()
    written = []
    for package in _PACKAGES:
        destination = target / package
        if destination.exists():
            shutil.rmtree(destination)
        destination.mkdir(parents=True)
        for stub in sorted((root / package).glob("*.pyi")):
            out = destination / stub.name
            # The stubs are someone else's code: check against them, not them.
            out.write_text("# mypy: ignore-errors\n" + repair(stub.read_text(), str(stub)))
            written.append(out)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path, help="where to write the repaired stubs (use as MYPYPATH)")
    args = parser.parse_args(argv)
    for path in write_stubs(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
