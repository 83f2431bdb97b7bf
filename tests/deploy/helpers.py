"""Helpers of the deploy tests."""

from __future__ import annotations

from typing import Any


def find_doc(docs: list[tuple[str, dict[str, Any]]], kind: str, name: str) -> dict[str, Any]:
    return next(doc for _, doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name)
