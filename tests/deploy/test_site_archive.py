"""The site archive (deploy/local/site*.py): its index, every refusal before anything is loaded, no secrets, and
where an installed site's compose files come from.

The archives here are written with the shared writer (generator/archive/indexed_tar.py) around a small stand-in of
``docker save``'s layout (manifest.json, config and layer blobs); the docker CLI is the boundary, faked on PATH
where a test shows that a refused archive never reaches it. The live lane (tests/deploy/live/test_site.py) makes
and installs a real one.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import pytest

from deploy.cli import main
from deploy.local import platforms, site, site_install, stack
from deploy.local.site_archive import check_saved, write_compose
from deploy.settings import Settings
from generator.archive.indexed_tar import file_entries, write_indexed_tar
from generator.archive.parts import checksum_file, split_file
from tests.helpers import tar_bytes

TAG = "unit-1"
BUILD = "build-0123456789abcdef"


def saved_images(refs: list[str], *, drop_layer: bool = False) -> tuple[bytes, dict[str, str]]:
    """A ``docker save`` tar of ``refs``: one config and two layers each (one shared), and ref -> image id."""
    blobs: dict[str, bytes] = {"blobs/sha256/" + "a" * 64: b"shared layer" * 100}
    manifest, ids = [], {}
    for n, ref in enumerate(refs):
        config = json.dumps({"n": n}).encode()
        config_id = hashlib.sha256(config).hexdigest()
        layer = f"layer of {ref}".encode() * 50
        layer_name = f"blobs/sha256/{hashlib.sha256(layer).hexdigest()}"
        blobs[f"blobs/sha256/{config_id}"] = config
        if not (drop_layer and n == 1):
            blobs[layer_name] = layer
        manifest.append({"Config": f"blobs/sha256/{config_id}", "RepoTags": [ref],
                         "Layers": ["blobs/sha256/" + "a" * 64, layer_name]})
        ids[ref] = f"sha256:{config_id}"
    return tar_bytes({"manifest.json": json.dumps(manifest).encode(), **blobs}), ids


def write_site_archive(folder: Path, *, index_changes: dict[str, Any] | None = None, drop_layer: bool = False,
                       name: str = f"tde-site-{TAG}.tar") -> Path:
    """A site archive as ``make_site_archive`` writes it, around stand-in images and repository."""
    variables = site.site_variables(TAG)
    refs = site.site_refs(variables)
    images, ids = saved_images(refs, drop_layer=drop_layer)
    payload = folder / f"payload-{name}"
    files = {site.IMAGES: images, f"repository/{BUILD}/manifest.json": b'{"name": "yolo"}',
             "repository/build-keys.json": b'{"0123": 1}',
             f"repository/{BUILD}/yolo/config.pbtxt": b'name: "yolo"\n', "compose/docker-compose.yml": b"services: {}\n",
             "compose/.env": b"TRITON_ADMIN_TOKEN=\n"}
    for member, data in files.items():
        (payload / member).parent.mkdir(parents=True, exist_ok=True)
        (payload / member).write_bytes(data)
    members = {member: payload / member for member in files}
    index = {"format": site.FORMAT, "kind": site.KIND, "tool_version": "test", "machine": platform.machine(),
             "tag": TAG, "variables": variables, "images": [{"ref": r, "id": ids[r]} for r in refs],
             "repository": {"build": BUILD, "manifests": [f"repository/{BUILD}/manifest.json"],
                            "volume_files": ["build-keys.json"]},
             "settings": {"max_batch": 4}, "files": file_entries(members), **(index_changes or {})}
    path = folder / name
    write_indexed_tar(path, site.INDEX, index, members)
    return path


def verify(given: Path, work: Path) -> dict[str, Any]:
    work.mkdir()
    index = site.READER.read_verified(given, work, lambda index: site_install.check_index(index, given.name))
    site_install._check_images(work, index, given.name)
    return index


def flip(path: Path, needle: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[data.index(needle) + 3] ^= 1
    path.write_bytes(bytes(data))


def test_a_site_archive_verifies_whole_and_from_any_of_its_parts(tmp_path: Path) -> None:
    archive = write_site_archive(tmp_path)
    index = verify(archive, tmp_path / "whole")
    assert index["repository"]["build"] == BUILD and (tmp_path / "whole" / "compose/.env").is_file()
    assert [i["ref"] for i in index["images"]] == [f"tde-site/yolo-triton-cpu:{TAG}", f"tde-site/yolo-builder-cpu:{TAG}",
                                                    f"tde-site/nginx:{TAG}", f"tde-site/prometheus:{TAG}"]
    parts = split_file(archive, 2048)
    assert len(parts) > 2
    assert verify(parts[1], tmp_path / "parts")["tag"] == TAG


@pytest.mark.parametrize(("damage", "message"), [
    (lambda p: flip(p, b"shared layer"), r"images/stack\.tar has sha256 .* altered or damaged"),
    (lambda p: flip(p, b'name: "yolo"'), rf"repository/{BUILD}/yolo/config\.pbtxt has sha256 .* altered"),
    (lambda p: p.write_bytes(p.read_bytes()[:5000]), "truncated or damaged|partial"),
])
def test_a_tampered_or_truncated_archive_is_refused_by_name(tmp_path: Path, damage: Any, message: str) -> None:
    archive = write_site_archive(tmp_path)
    damage(archive)
    with pytest.raises(site.SiteArchiveError, match=message) as caught:
        verify(archive, tmp_path / "work")
    assert str(caught.value).startswith(f"refusing the archive {archive.name}: ")
    assert str(caught.value).endswith("nothing was loaded")


def test_an_index_that_is_not_this_sites_is_refused_before_a_member_is_read(tmp_path: Path) -> None:
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "other.tar": ({"machine": "s390x"}, "its images are for s390x"),
        "kind.tar": ({"kind": None}, "not a site archive"),
        "secret.tar": ({"variables": {**site.site_variables(TAG), "TRITON_ADMIN_TOKEN": "x"}}, "must be exactly"),
        "tag.tar": ({"tag": "bad tag"}, "not a Docker tag"),
        "refs.tar": ({"images": []}, "not the stack's under"),
        "build.tar": ({"repository": {"build": "../etc"}}, "not a folder it carries"),
        "file.tar": ({"repository": {"build": BUILD, "volume_files": ["../x"]}}, "volume file '../x' is not a file"),
    }
    for name, (changes, message) in cases.items():
        archive = write_site_archive(tmp_path, index_changes=changes, name=name)
        with pytest.raises(site.SiteArchiveError, match=message):
            verify(archive, tmp_path / f"work-{name}")
        assert not list((tmp_path / f"work-{name}").iterdir())  # refused at the index: nothing read


def test_saved_images_missing_a_layer_are_refused(tmp_path: Path) -> None:
    archive = write_site_archive(tmp_path, drop_layer=True)
    with pytest.raises(site.SiteArchiveError, match=r"images/stack\.tar lacks blobs/sha256/.*, which "
                                                    r"\['tde-site/yolo-builder-cpu:unit-1'\] needs"):
        verify(archive, tmp_path / "work")


def test_check_saved_reads_ids_from_docker_saves_manifest(tmp_path: Path) -> None:
    refs = ["tde-site/a:1", "tde-site/b:1"]
    data, ids = saved_images(refs)
    (tmp_path / "s.tar").write_bytes(data)
    assert check_saved(tmp_path / "s.tar", refs) == ids
    with pytest.raises(site.SiteArchiveError, match="does not hold tde-site/c:1"):
        check_saved(tmp_path / "s.tar", [*refs, "tde-site/c:1"])


def _recording_docker(folder: Path) -> tuple[dict[str, str], Path]:
    """A `docker` on PATH that records every call and fails: a refused archive must never reach it."""
    log = folder / "docker-calls.log"
    script = folder / "bin" / "docker"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 1\n')
    script.chmod(0o755)
    return {"PATH": f"{script.parent}{os.pathsep}{os.environ['PATH']}"}, log


def test_install_refuses_a_tampered_archive_in_one_line_and_never_calls_docker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    env, log = _recording_docker(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(site_install, "check_engine", lambda: ((26, 1), (2, 26)))
    monkeypatch.setattr(site_install, "daemon_platform", lambda: platforms.by_machine(platform.machine()))
    monkeypatch.setattr(site_install, "SITES_ROOT", tmp_path / "sites")
    monkeypatch.setattr(site, "SITES_ROOT", tmp_path / "sites")
    archive = write_site_archive(tmp_path)
    flip(archive, b"layer of tde-site/nginx")
    assert main(["install", "--local", "--project", "p", str(archive)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: refusing the archive {archive.name}: images/stack.tar has sha256") and "\n" not in err
    assert not log.exists()
    assert list((tmp_path / "sites").iterdir()) == []  # the verified copy is gone too

    parts = split_file(write_site_archive(tmp_path, name="p.tar"), 4096)
    parts[0].write_bytes(parts[0].read_bytes()[:-10])
    assert main(["install", "--local", "--project", "p", str(parts[-1])]) == 1
    err = capsys.readouterr().err.strip()
    assert "part p.tar.001-of-" in err and "truncated" in err and "\n" not in err
    parts[1].unlink()
    assert main(["install", "--local", "--project", "p", str(parts[0])]) == 1
    assert "part p.tar.002-of-" in capsys.readouterr().err and not log.exists()


    listed = split_file(write_site_archive(tmp_path, name="s.tar"), 4096)
    checksum_file(listed)
    data = bytearray(listed[2].read_bytes())
    data[10] ^= 1
    listed[2].write_bytes(bytes(data))
    assert main(["install", "--local", "--project", "p", str(listed[0])]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: refusing the archive s.tar.001-of-") and "\n" not in err
    assert f"part {listed[2].name} has sha256" in err and err.endswith("nothing was loaded") and not log.exists()


def test_the_carried_files_hold_no_secret(tmp_path: Path) -> None:
    write_compose(Settings(), tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(
        site.COMPOSE_FILES)
    env = (tmp_path / ".env").read_text()
    assert "\nTRITON_ADMIN_TOKEN=\n" in env and "\nGRAFANA_ADMIN_PASSWORD=\n" in env
    assert not any("PRIVATE KEY" in p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert set(site.site_variables("t")) == set(site.CARRIED_VARIABLES)


def test_the_place_script_stages_links_a_new_site_and_leaves_a_running_one_on_its_build(tmp_path: Path) -> None:
    """The script the builder image runs to copy a repository into the volume, run here with this sh and tar."""
    volume = tmp_path / "models"
    volume.mkdir()

    def place(build: str, content: bytes = b"x") -> str:
        stream = tar_bytes({f"{build}/manifest.json": build.encode(), f"{build}/yolo/1/model.py": content,
                             "build-keys.json": build.encode()})
        done = subprocess.run(["sh", "-c", site_install.PLACE, "sh", build, str(volume)], input=stream,
                              capture_output=True, check=True)
        return done.stdout.decode().strip()

    assert place("build-1") == "stable" and (volume / "current").readlink().as_posix() == "build-1"
    assert (volume / "build-keys.json").read_bytes() == b"build-1"  # the volume's own files: where it has none
    assert place("build-1") == "stable"  # installed again: nothing moves
    assert place("build-2") == "candidate" and (volume / "current").readlink().as_posix() == "build-1"
    assert (volume / "build-2" / "manifest.json").read_bytes() == b"build-2"
    assert (volume / "build-keys.json").read_bytes() == b"build-1"  # kept: the running site's record
    assert sorted(p.name for p in volume.iterdir()) == ["build-1", "build-2", "build-keys.json", "current"]
    assert place("build-1", b"changed") == "differs"  # kept as it is: the installer refuses, naming it
    assert (volume / "build-1" / "yolo/1/model.py").read_bytes() == b"x" and len(list(volume.iterdir())) == 4


def test_an_installed_site_runs_from_its_own_rendered_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "SITES_ROOT", tmp_path)
    assert stack.installed_site("p") is None
    assert stack.compose_args("p")[2] == str(stack.DEPLOY_DIR)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / stack.SITE_ENV).write_text("".join(f"{k}={v}\n" for k, v in site.site_variables(TAG).items()))
    assert stack.installed_site("p") == site.site_variables(TAG)
    args = stack.compose_args("p", "ps")
    assert args[:5] == ["compose", "--project-directory", str(tmp_path / "p"), "-f",
                        str(tmp_path / "p" / "docker-compose.yml")]
    assert args[5:7] == ["--env-file", str(tmp_path / "p" / ".env")] and args[-1] == "ps"


def test_the_built_images_are_those_compose_names_the_environment_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy.local.site_archive import source_refs

    bases = {"NGINX_IMAGE": "tde-local/nginx:bookworm", "PROMETHEUS_IMAGE": "tde-local/prometheus:bookworm"}
    tag = Settings().cpu_image_tag
    monkeypatch.delenv("TRITON_CPU_IMAGE", raising=False)
    monkeypatch.setenv("BUILDER_CPU_IMAGE", "mine/builder")
    assert source_refs(bases) == {"TRITON_CPU_IMAGE": f"yolo-triton-cpu:{tag}", "BUILDER_CPU_IMAGE": f"mine/builder:{tag}",
                                  **bases}
