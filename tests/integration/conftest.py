"""Fixtures of the integration tests that start servers of their own (the shared one is in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.builder.options import BuildOptions
from generator.builder.pipeline import build_repository


@pytest.fixture(scope="session")
def demo_repository(tmp_path_factory: pytest.TempPathFactory, demo_onnx: Path) -> Path:
    """The demo ensemble `yolo` as `python -m generator build` writes it by default."""
    repository = tmp_path_factory.mktemp("served") / "repository"
    build_repository(demo_onnx, repository, BuildOptions(name="yolo"))
    return repository
