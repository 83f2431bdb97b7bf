"""Fixtures of the integration tests that start servers of their own (the shared one is in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions


@pytest.fixture(scope="session")
def demo_repository(tmp_path_factory: pytest.TempPathFactory, demo_onnx: Path) -> Path:
    """The demo ensemble `yolo` as `python -m generator build` writes it, with an explicit 5 s queue budget.

    These servers test healing, draining and the CLI: a budget that does not depend on the service time the build
    happened to measure keeps their timings about the faults alone. The default (derived) budget is tested by
    tests/integration/test_overload.py and by the shared ``triton_server`` (tests/conftest.py).
    """
    repository = tmp_path_factory.mktemp("served") / "repository"
    build_repository(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    return repository
