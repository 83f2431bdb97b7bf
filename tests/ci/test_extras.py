"""The package extras: each image installs what it runs, and the NGC images (Python 3.12) get wheels only.

NGC 26.xx images run CPython 3.12. tritonclient 2.51's HTTP client pins geventhttpclient<=2.0.2, which has no
cp312 wheel, so an image installing it must compile it (and its C dependencies). The `network` tests ask
pip to resolve the extras for CPython 3.12 on manylinux x86_64 with ``--only-binary=:all:`` against the
package index (PyPI is reachable on the development machines and in CI).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SELF = PROJECT["name"]
# pip does not widen an explicit --platform to older manylinux tags, so every glibc up to 2.28 is listed.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"
]


def requirements(*extras: str) -> list[str]:
    """Base dependencies plus the extras', with the project's references to its own extras expanded."""
    result = list(PROJECT["dependencies"])
    pending = list(extras)
    while pending:
        for requirement in PROJECT["optional-dependencies"][pending.pop()]:
            own = re.fullmatch(rf"{re.escape(SELF)}\[([\w,]+)\]", requirement)
            if own:
                pending.extend(own.group(1).split(","))
            elif requirement not in result:
                result.append(requirement)
    return result


def names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in reqs}


def test_base_dependencies_are_minimal() -> None:
    assert names(PROJECT["dependencies"]) == {"numpy"}


def test_images_do_not_get_the_http_client() -> None:
    """tritonclient[http] (and [all]) pull geventhttpclient; only the client and load-test extras may."""
    for extra in ("build", "serve"):
        tritonclient = [r for r in requirements(extra) if r.startswith("tritonclient")]
        assert all("http" not in r and "all" not in r for r in tritonclient), (extra, tritonclient)
    assert "tritonclient[grpc,http]==2.73.0" in requirements("loadtest")


def test_dev_is_everything_the_tests_need() -> None:
    wanted = {r for extra in ("build", "client", "loadtest", "deploy") for r in requirements(extra)}
    assert wanted <= set(requirements("dev"))


def test_numpy_2_for_the_user_and_numpy_1_only_for_the_ngc_image() -> None:
    """The embedded server's stubs take numpy 1.x from their own lock; only the NGC image's set keeps it."""
    numpy = {extra: [r for r in requirements(extra) if names([r]) == {"numpy"}] for extra in ("build", "client", "dev")}
    assert all("numpy>=2" in reqs for reqs in numpy.values()), numpy
    assert "numpy>=1.24,<2" in requirements("serve")
    assert not [r for r in PROJECT["dependencies"] if "<2" in r]


def resolve_for_python_312(reqs: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", "--abi", "cp312", "--target", str(tmp_path / "target"),
               *(arg for platform in PLATFORMS for arg in ("--platform", platform)), *reqs]
    return subprocess.run(command, capture_output=True, text=True, timeout=600), report


@pytest.mark.network
@pytest.mark.parametrize("extra", ["build", "serve"])
def test_image_extras_resolve_to_cp312_manylinux_wheels(extra: str, tmp_path: Path) -> None:
    proc, report = resolve_for_python_312(requirements(extra), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = json.loads(report.read_text())["install"]
    assert all(item["download_info"]["url"].endswith(".whl") for item in installed)
    assert "geventhttpclient" not in {item["metadata"]["name"].lower() for item in installed}


@pytest.mark.network
def test_the_old_dependency_would_not(tmp_path: Path) -> None:
    """Before the extras, the builder installed tritonclient[all]: no wheel set exists for Python 3.12."""
    proc, _ = resolve_for_python_312(["tritonclient[all]==2.51.0"], tmp_path)
    assert proc.returncode != 0 and "geventhttpclient" in proc.stderr
