"""No function in the shipped packages grows past 80 lines (CONTRIBUTING.md asks for about 60)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("generator", "clients", "loadtest", "deploy")
NOT_SHIPPED = ("generator/demo/training",)  # excluded from the wheel (pyproject.toml)
LIMIT = 80


def long_functions() -> list[str]:
    found = []
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(NOT_SHIPPED):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > LIMIT:
                        found.append(f"{relative}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    assert long_functions() == []


def test_the_check_sees_the_packages() -> None:
    assert all((ROOT / package / "__init__.py").exists() for package in SHIPPED)
