"""Another architecture for the CPU stack: its names, the emulation check, the run's variables, the archive's index.

The live proof (arm64 images built, started and serving under emulation) is tests/deploy/emulated/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy.cli import main
from deploy.errors import LocalStackError
from deploy.local import platforms, site, site_install
from deploy.local.credentials import ensure_credentials
from deploy.local.stack import LocalStack, stack_env
from deploy.settings import Settings

AMD64, ARM64 = platforms.PLATFORMS


def binfmt(folder: Path, state: str | None) -> Path:
    """A binfmt_misc folder as the kernel shows it, with qemu-aarch64 in ``state`` (None: not registered)."""
    folder.mkdir(exist_ok=True)
    if state is not None:
        (folder / "qemu-aarch64").write_text(f"{state}\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
                                             "flags: PF\n")
    return folder


@pytest.mark.parametrize("spelled", ["linux/arm64", "arm64", "aarch64", "linux/arm64/v8", " Linux/ARM64 "])
def test_every_spelling_of_arm64_names_one_platform(spelled: str) -> None:
    assert platforms.parse(spelled) == ARM64
    assert (ARM64.docker, ARM64.debian, ARM64.machine, ARM64.qemu) == ("linux/arm64", "arm64", "aarch64",
                                                                      "qemu-aarch64")


def test_an_unknown_platform_is_one_line_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(LocalStackError, match=r"unknown platform 's390x': .* linux/amd64, linux/arm64"):
        platforms.parse("s390x")
    assert main(["build", "--local", "--platform", "linux/s390x"]) == 1  # refused before docker is asked anything
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: unknown platform 'linux/s390x': the CPU stack builds for linux/amd64, linux/arm64"]


def test_a_foreign_architecture_runs_only_where_its_emulation_is_registered_and_enabled(tmp_path: Path) -> None:
    assert platforms.why_not_runnable(AMD64, AMD64, binfmt(tmp_path / "none", None)) is None
    for folder in (binfmt(tmp_path / "none", None), binfmt(tmp_path / "off", "disabled")):
        reason = platforms.why_not_runnable(ARM64, AMD64, folder)
        assert reason is not None and "runs linux/amd64 and no aarch64 emulation is registered" in reason
        assert "qemu-user-static binfmt-support" in reason
    assert platforms.why_not_runnable(ARM64, AMD64, binfmt(tmp_path / "on", "enabled")) is None


def test_the_runs_variables_build_and_start_another_architecture_under_its_own_tags(tmp_path: Path) -> None:
    credentials = ensure_credentials(tmp_path / "state", owner=0)
    settings = Settings()
    own = stack_env(settings, LocalStack(), credentials, {})
    assert "DOCKER_DEFAULT_PLATFORM" not in own and "CPU_IMAGE_TAG" not in own  # deploy/.env's tag: unchanged
    arm = stack_env(settings, LocalStack(platform="arm64"), credentials, {})
    assert arm["DOCKER_DEFAULT_PLATFORM"] == "linux/arm64"
    assert arm["CPU_IMAGE_TAG"] == f"{settings.cpu_image_tag}-arm64"


def index_for(**changes: Any) -> dict[str, Any]:
    tag = "unit-1"
    variables = site.site_variables(tag)
    return {"kind": site.KIND, "tag": tag, "variables": variables,
            "images": [{"ref": ref} for ref in site.site_refs(variables)],
            "repository": {"build": "versions"}, "files": {"repository/versions/a": {}}, **changes}


def test_an_arm64_archive_is_refused_in_one_line_by_an_amd64_daemon_without_emulation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arm = index_for(machine="aarch64", platform="linux/arm64")
    monkeypatch.setattr(platforms, "BINFMT_DIR", binfmt(tmp_path / "none", None))
    with pytest.raises(site.SiteArchiveError) as refused:
        site_install.check_index(arm, "tde-site-x.tar", AMD64)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("refusing the archive tde-site-x.tar: its images are for "
                                                      "linux/arm64 (aarch64) and this Docker daemon runs linux/amd64")
    assert message.endswith("nothing was loaded")
    site_install.check_index(arm, "tde-site-x.tar", ARM64)  # an arm64 site
    monkeypatch.setattr(platforms, "BINFMT_DIR", binfmt(tmp_path / "on", "enabled"))
    site_install.check_index(arm, "tde-site-x.tar", AMD64)  # emulated here
    # An archive from before the platform was recorded names its machine only.
    site_install.check_index(index_for(machine="x86_64"), "old.tar", AMD64)
    with pytest.raises(site.SiteArchiveError, match=r"for linux/amd64 \(x86_64\) and this Docker daemon runs linux/arm64"):
        site_install.check_index(index_for(machine="x86_64"), "old.tar", ARM64)
