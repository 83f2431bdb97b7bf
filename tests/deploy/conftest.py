"""Fixtures for the deploy tests: a fresh render of the default settings, parsed once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.checks import CHECK_SECRETS
from deploy.composefile import load_compose_dir, parse_env
from deploy.render.files import K8S_ON_DEMAND_FILES, K8S_RESOURCE_FILES, render_all, write_rendered
from deploy.settings import Settings
from deploy.validate import load_k8s_documents

from .pod import Pod, pod_settings, running_pod


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def rendered_dir(tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Path:
    out = tmp_path_factory.mktemp("deploy-render")
    write_rendered(render_all(settings), out)
    return out


@pytest.fixture(scope="session")
def env(rendered_dir: Path) -> dict[str, str]:
    return parse_env((rendered_dir / ".env").read_text())


@pytest.fixture()
def compose(rendered_dir: Path) -> dict[str, Any]:
    """Interpolated like `docker compose config` would, with stand-in secrets; fresh per test."""
    return load_compose_dir(rendered_dir, CHECK_SECRETS)


@pytest.fixture()
def k8s_docs(rendered_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    return load_k8s_documents(rendered_dir / "k8s", (*K8S_RESOURCE_FILES, *K8S_ON_DEMAND_FILES))


@pytest.fixture(scope="session")
def pod() -> Iterator[Pod]:
    """One running deployment pod (entry point, watchdog, Triton, nginx) for the tests that do not break it."""
    with running_pod(pod_settings()) as running:
        yield running
