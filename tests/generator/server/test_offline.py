"""The offline archive: parts, and every refusal before anything is installed.

Most tests write small archives with the module's own writer and stand-in wheels, with the lock and the server's
pinned hash pointed at those wheels (the checks are what is under test, not the published files); the network
test makes and verifies a real one.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import sys
import tarfile
from pathlib import Path

import pytest

from generator.archive.parts import find_parts, parse_size, split_file
from generator.errors import ServerError
from generator.server import embedded, environments, offline
from generator.server.environments import STUB_CPU
from generator.server.offline import INDEX, Target, install_archive, verify_archive

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
OTHER = "3.10" if HERE != "3.10" else "3.11"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Stand-in wheels, with a stub-cpu lock pinning their hashes and the server hash pinned to the fake server."""
    files = {"triton/nvidia_pytriton-0.5.13-py3-none-any.whl": b"server" * 1000,
             "stub/numpy-1.26.4-cp311-none-any.whl": b"numpy" * 3000,
             "stub/tiny-1.0-py3-none-any.whl": b"tiny"}
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "stub-cpu.txt").write_text(
        f"numpy==1.26.4 \\\n    --hash=sha256:{sha(files['stub/numpy-1.26.4-cp311-none-any.whl'])}\n"
        f"tiny==1.0 \\\n    --hash=sha256:{'0' * 64} \\\n"
        f"    --hash=sha256:{sha(files['stub/tiny-1.0-py3-none-any.whl'])}\n")
    (locks / "perf-analyzer.txt").write_text(f"tiny==1.0 \\\n    --hash=sha256:{sha(b'perf-tiny')}\n")
    monkeypatch.setattr(environments, "LOCKS", locks)
    monkeypatch.setitem(embedded.WHEEL_SHA256, platform.machine(), sha(files["triton/nvidia_pytriton-0.5.13-py3-none-any.whl"]))
    return files


def write_archive(path: Path, files: dict[str, bytes], *, python: str = HERE, lock_sha: str | None = None,
                  listed: dict[str, bytes] | None = None, extra: dict[str, bytes] | None = None,
                  schema_sha: str | None = None) -> Path:
    """An archive as ``make_archive`` writes it; ``listed`` overrides what the index says, ``extra`` adds
    members the index does not list."""
    index = {"format": offline.FORMAT, "tool_version": "test",
             "target": {"python": python, "machine": platform.machine(), "stub": "cpu"},
             "locks": [{"name": "stub-cpu.txt", "sha256": lock_sha or STUB_CPU.digest()}], "runtime": None,
             "schema": {"name": "perf-analyzer.txt", "sha256": schema_sha} if schema_sha else None,
             "files": {n: {"size": len(d), "sha256": sha(d)} for n, d in (listed or files).items()}}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(INDEX, json.dumps(index).encode()), *files.items(), *(extra or {}).items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def refused(given: Path, work: Path, match: str) -> None:
    with pytest.raises(ServerError, match=match) as caught:
        verify_archive(given, work)
    assert "nothing was installed" in str(caught.value) or "part" in str(caught.value)


def test_part_sizes_read_like_split() -> None:
    assert parse_size("55M") == 55 * 2**20 and parse_size("800k") == 800 * 1024 and parse_size("4096") == 4096
    for bad in ("0", "55MB", "-1M", ""):
        with pytest.raises(ServerError, match="part size"):
            parse_size(bad)


def test_parts_are_numbered_found_from_any_one_and_checked_whole(tmp_path: Path) -> None:
    whole = tmp_path / "a.tar"
    whole.write_bytes(bytes(range(256)) * 40)  # 10,240 bytes
    parts = split_file(whole, 4096)
    assert [p.name for p in parts] == ["a.tar.001-of-003", "a.tar.002-of-003", "a.tar.003-of-003"]
    assert not whole.exists() and find_parts(parts[1]) == parts
    assert b"".join(p.read_bytes() for p in parts) == bytes(range(256)) * 40
    parts[0].write_bytes(parts[0].read_bytes()[:-1])
    with pytest.raises(ServerError, match=r"part a\.tar\.001-of-003 has 4095 bytes .* truncated"):
        find_parts(parts[2])
    parts[1].unlink()
    with pytest.raises(ServerError, match=r"incomplete: part a\.tar\.002-of-003 is missing"):
        find_parts(parts[0])
    one = tmp_path / "b.tar"
    one.write_bytes(b"x" * 10)
    assert split_file(one, 4096) == [one] and find_parts(one) == [one]


def test_a_whole_archive_verifies_from_one_file_and_from_its_parts(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    archive = write_archive(tmp_path / "ok.tar", pinned)
    verified = verify_archive(archive, tmp_path / "one")
    assert verified.target == Target(HERE, platform.machine(), "cpu") and verified.runtime is None
    assert {p.relative_to(tmp_path / "one").as_posix(): p.read_bytes()
            for p in (tmp_path / "one").rglob("*") if p.is_file()} == pinned
    parts = split_file(archive, 4000)
    assert len(parts) > 3
    assert verify_archive(parts[-1], tmp_path / "parts").server_wheel.read_bytes() == pinned[
        "triton/nvidia_pytriton-0.5.13-py3-none-any.whl"]


def test_tampered_truncated_partial_or_padded_archives_are_refused(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    tampered = write_archive(tmp_path / "t.tar", pinned)
    data = bytearray(tampered.read_bytes())
    data[data.index(b"numpynumpy") + 7] ^= 1
    tampered.write_bytes(bytes(data))
    refused(tampered, tmp_path / "w1", r"stub/numpy-1\.26\.4-cp311-none-any\.whl has sha256 .* altered or damaged")

    truncated = write_archive(tmp_path / "c.tar", pinned)
    truncated.write_bytes(truncated.read_bytes()[:9000])
    refused(truncated, tmp_path / "w2", "truncated or damaged|partial")

    partial = write_archive(tmp_path / "p.tar", {k: v for k, v in pinned.items() if "tiny" not in k}, listed=pinned)
    refused(partial, tmp_path / "w3", r"partial: 1 listed file\(s\) missing, first stub/tiny-1\.0")

    padded = write_archive(tmp_path / "x.tar", pinned, extra={"stub/evil-1.0-py3-none-any.whl": b"evil"})
    refused(padded, tmp_path / "w4", r"'stub/evil-1\.0-py3-none-any\.whl', which its index does not list")

    sneaky = write_archive(tmp_path / "s.tar", pinned, extra={"../../etc/x": b"x"},
                           listed={**pinned, "../../etc/x": b"x"})
    refused(sneaky, tmp_path / "w5", r"'\.\./\.\./etc/x', which is not a file the index lists")
    assert not (tmp_path / "etc").exists()

    not_ours = tmp_path / "n.tar"
    with tarfile.open(not_ours, "w") as tar:
        tar.addfile(tarfile.TarInfo("README"), io.BytesIO(b""))
    refused(not_ours, tmp_path / "w6", f"does not start with {INDEX}")


def test_another_python_lock_or_unpinned_wheel_is_refused(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    refused(write_archive(tmp_path / "py.tar", pinned, python=OTHER), tmp_path / "w1",
            f"it is for Python {OTHER} on .*, this is Python {HERE}.*--python {HERE}")
    refused(write_archive(tmp_path / "lock.tar", pinned, lock_sha="f" * 64), tmp_path / "w2",
            "made from another stub-cpu.txt")
    swapped = {**pinned, "stub/tiny-1.0-py3-none-any.whl": b"tinier"}
    refused(write_archive(tmp_path / "pin.tar", swapped), tmp_path / "w3",
            r"stub/tiny-1\.0-py3-none-any\.whl is not a wheel stub-cpu\.txt pins")
    with pytest.raises(ServerError, match="--stub-env takes cpu and/or gpu"):
        Target(HERE, platform.machine(), "cpu,tpu")
    assert Target("3.12", "x86_64", "gpu,cpu").stem == "tde-offline-cpu-gpu-py3.12-x86_64"
    server = {**pinned, "triton/nvidia_pytriton-0.5.13-py3-none-any.whl": b"another server"}
    refused(write_archive(tmp_path / "srv.tar", server), tmp_path / "w4", "refusing to use it")


def test_the_schema_environment_is_checked_against_its_own_lock(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    from generator.server.environments import PERF_ANALYZER

    with_perf = {**pinned, "perf/tiny-1.0-py3-none-any.whl": b"perf-tiny"}
    verified = verify_archive(write_archive(tmp_path / "ok.tar", with_perf, schema_sha=PERF_ANALYZER.digest()),
                              tmp_path / "w0")
    assert (verified.root / "perf/tiny-1.0-py3-none-any.whl").read_bytes() == b"perf-tiny"
    refused(write_archive(tmp_path / "old.tar", with_perf, schema_sha="e" * 64), tmp_path / "w1",
            "made from another perf-analyzer.txt")
    swapped = {**pinned, "perf/tiny-1.0-py3-none-any.whl": b"not perf-tiny"}
    refused(write_archive(tmp_path / "pin.tar", swapped, schema_sha=PERF_ANALYZER.digest()), tmp_path / "w2",
            r"perf/tiny-1\.0-py3-none-any\.whl is not a wheel perf-analyzer\.txt pins")


def test_a_refused_archive_installs_nothing(tmp_path: Path, pinned: dict[str, bytes],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_DETECTION_CACHE", str(cache))
    bad = write_archive(tmp_path / "b.tar", {**pinned, "stub/tiny-1.0-py3-none-any.whl": b"tinier"})
    with pytest.raises(ServerError, match="nothing was installed"):
        install_archive(bad, cache)
    assert list(cache.iterdir()) == []
    with pytest.raises(ServerError, match="holds the stub-cpu environment, not stub-gpu"):
        install_archive(write_archive(tmp_path / "g.tar", pinned), cache, stub="gpu")
    assert list(cache.iterdir()) == []


def test_the_lock_hashes_map_to_their_pins() -> None:
    hashes = offline.lock_hashes(STUB_CPU.lock.read_text())
    assert "numpy==1.26.4" in hashes.values() and all(len(h) == 64 for h in hashes)


@pytest.mark.network
def test_a_real_cpu_archive_for_this_machine_is_made_and_verified(tmp_path: Path) -> None:
    """pip downloads the pinned server and the stub-cpu lock's wheels for this Python; every check passes."""
    paths = offline.make_archive(Target.here("cpu"), tmp_path / "out", split_bytes=parse_size("60M"), schema=True)
    assert len(paths) > 1 and all(".tar.0" in p.name for p in paths)
    verified = verify_archive(paths[0], tmp_path / "work")
    assert verified.server_wheel.name.startswith("nvidia_pytriton-0.5.13")
    assert {offline.wheel_project(p.name) for p in (tmp_path / "work" / "stub").iterdir()} >= {"numpy", "onnxruntime"}
    perf = {offline.wheel_project(p.name) for p in (tmp_path / "work" / "perf").iterdir()}
    assert "tritonclient" in perf and "numpy" not in perf  # numpy 1.26.4 travels once, in stub/


def test_serve_prepare_from_archive_is_one_command_with_a_one_line_refusal(
        tmp_path: Path, pinned: dict[str, bytes], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from generator.cli import main

    monkeypatch.setenv("TRITON_DETECTION_CACHE", str(tmp_path / "cache"))
    archive = write_archive(tmp_path / "p.tar", {k: v for k, v in pinned.items() if "tiny" not in k}, listed=pinned)
    assert main(["serve", "--from-archive", str(archive)]) == 1
    assert "use it with --prepare" in capsys.readouterr().err
    assert main(["serve", "--prepare", "--from-archive", str(archive)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: refusing the archive p.tar: it is partial") and "\n" not in err
    assert main(["archive", "--present", str(tmp_path / "none.txt")]) == 1
    assert "--present applies to --runtime" in capsys.readouterr().err


def test_the_offline_install_needs_the_standard_library_alone(tmp_path: Path) -> None:
    """A bare offline host: ``serve --prepare --from-archive`` imports nothing outside the standard library."""
    import subprocess

    root = Path(__file__).resolve().parents[3]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from generator.cli import main; "
            "sys.exit(main(['serve', '--prepare', '--from-archive', sys.argv[2]]))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(root), str(tmp_path / "none.tar")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == f"error: archive not found: {tmp_path / 'none.tar'}"
