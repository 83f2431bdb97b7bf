"""Fill the models volume for this machine and switch Triton's repository to it atomically.

    python3 -m deploy.entrypoints.build_models --volume /models [--link current] [--versioned] -- GENERATOR_BUILD_FLAGS...

With ``--versioned`` (what compose and Kubernetes run) the volume holds one versioned repository, ``versions``
(docs/UPDATING.md), and ``current`` points at it: each new key adds a version with ``generator build --version
next`` beside the others instead of replacing anything (the first one is stable, later ones are candidates that
``deploy.entrypoints.rollout_job`` tries), and a key already built reuses its version (``version-keys.json`` in the volume maps
keys to versions). The rest of this docstring describes the classic layout, one unversioned build per key:

The volume holds one directory per build, ``build-<key>``, and a symlink, ``current``, to the one Triton
serves (``--model-repository=/models/current``). The key digests everything that decides the repository:
the detector ONNX, the build flags and the installed generator code, so a new ONNX, new settings or a new
builder image build a new repository instead of reusing one that ``generator check`` would still accept.

1. ``build-<key>`` exists and ``generator check`` accepts it on this machine: reuse it.
2. Otherwise ``generator build --output build-<key>``: the generator stages the repository in a sibling
   temporary directory, which is inside the volume too, and renames it into place on the same filesystem.
3. ``generator check build-<key>``: a repository that would not load here is never switched to.
4. Point ``current`` at it: a new symlink renamed over the old one, one atomic ``rename(2)``.
5. Remove builds other than the new and the previous one (a running Triton may still read the previous).

A kill at any moment (container stop, OOM, node loss) leaves ``current`` on the previous complete
repository, or on the new complete one once step 4 happened; never on a partial one. The kubelet and the
Kubernetes AtomicWriter publish ConfigMaps the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy import proxy_admission
from deploy.entrypoints.repository_check import checked
from generator.errors import GeneratorError
from generator.repository.files import sha256_file

logger = logging.getLogger(__name__)

BUILD_PREFIX = "build-"
VERSIONS_DIR = "versions"  # the versioned repository inside the volume
KEYS_FILE = "version-keys.json"  # build key -> the version it built (not "build-": remove_stale would take it)
KEY_CHARS = 16
_CODE_SUFFIXES = (".py", ".j2", ".json", ".onnx", ".txt")


class VolumeError(Exception):
    """The volume could not be filled or switched; the message says what to do."""


def code_digest() -> str:
    """Digest of the installed generator package: a new builder image with changed code rebuilds."""
    import generator

    root = Path(generator.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _CODE_SUFFIXES):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + sha256_file(path).encode() + b"\0")
    return digest.hexdigest()


def onnx_path(build_flags: Sequence[str]) -> Path:
    """The ``--onnx`` the build reads; without it the generator builds its bundled demo."""
    flags = list(build_flags)
    if "--onnx" in flags and flags.index("--onnx") + 1 < len(flags):
        return Path(flags[flags.index("--onnx") + 1])
    from generator.demo import DEMO_ONNX

    return Path(DEMO_ONNX)


def build_key(build_flags: Sequence[str], key_files: Sequence[Path] = ()) -> str:
    """What decides the repository's content, digested: ONNX bytes, build flags, generator code, and the
    ``key_files`` of the host (the Jetson profile's L4T release file: a JetPack upgrade builds a new plan)."""
    onnx = onnx_path(build_flags)
    if not onnx.is_file():
        raise VolumeError(f"the detector ONNX {onnx} does not exist; bake it into the builder image")
    missing = [str(path) for path in key_files if not path.is_file()]
    if missing:
        raise VolumeError(f"{', '.join(missing)} is not mounted; the build key reads it (docs/EDGE.md)")
    digest = hashlib.sha256()
    for part in (sha256_file(onnx), "\0".join(build_flags), code_digest(), *(sha256_file(p) for p in key_files)):
        digest.update(part.encode() + b"\n")
    return digest.hexdigest()[:KEY_CHARS]


def _generator(*args: str) -> int:
    """Run ``python -m generator ARGS`` with its output passed through; its exit code."""
    return subprocess.run([sys.executable, "-m", "generator", *args], check=False).returncode


def _accepted(repository: Path) -> bool:
    """``generator check`` of ``repository`` on this machine (deploy/entrypoints/repository_check.py)."""
    result = checked(repository)
    return result is not None and result.ok


def switch_link(volume: Path, link: str, target: str) -> str | None:
    """Point ``volume/link`` at ``target`` (relative) with one atomic rename; return the previous target."""
    current = volume / link
    previous = str(current.readlink()) if current.is_symlink() else None
    if current.exists() and not current.is_symlink():
        raise VolumeError(f"{current} exists and is not a symlink; move it away (it is not a build of this tool)")
    staged = volume / f".{link}.tmp-{os.getpid()}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(target)
    staged.replace(current)  # rename(2): readers see the old link or the new one, never none
    return previous


def remove_stale(volume: Path, keep: set[str], link: str) -> list[str]:
    """Remove this tool's builds and leftovers not in ``keep``; never touch anything else on the volume."""
    import shutil

    removed = []
    for entry in volume.iterdir():
        ours = entry.name.startswith((BUILD_PREFIX, f".{BUILD_PREFIX}", f".{link}.tmp-"))
        if not ours or entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed


def install(volume: Path, link: str, build_flags: Sequence[str], key_files: Sequence[Path] = ()) -> Path:
    """Steps 1-5 of the module docstring; returns the repository ``volume/link`` now points at."""
    if not volume.is_dir():
        raise VolumeError(f"{volume} is not a directory; mount the models volume there")
    if any(flag == "--output" or flag.startswith("--output=") for flag in build_flags):
        raise VolumeError("do not pass --output: the build goes to the volume's build-<key> directory")
    name = BUILD_PREFIX + build_key(build_flags, key_files)
    target = volume / name
    if target.is_dir() and _accepted(target):
        logger.info("%s already matches this machine and these settings; reusing it", target)
    else:
        logger.info("building the repository into %s", target)
        if _generator("build", *build_flags, "--output", str(target)) != 0:
            raise VolumeError(f"generator build failed; {volume / link} still points at the previous repository")
        if not _accepted(target):
            raise VolumeError(f"generator check refused the new build {target}; {volume / link} is unchanged")
    previous = switch_link(volume, link, name)
    removed = remove_stale(volume, {name, previous or "", link}, link)
    logger.info("%s -> %s (previous: %s; removed: %s)", volume / link, name, previous, ", ".join(removed) or "none")
    return target


def _read_keys(volume: Path) -> dict[str, int]:
    import json

    path = volume / KEYS_FILE
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise VolumeError(f"cannot read {path}: {exc}; remove it (the next build adds a new version)") from exc
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_keys(volume: Path, keys: dict[str, int]) -> None:
    import json

    staged = volume / f".{KEYS_FILE}.tmp-{os.getpid()}"
    staged.write_text(json.dumps(keys, indent=2, sort_keys=True) + "\n")
    staged.replace(volume / KEYS_FILE)


def install_version(volume: Path, link: str, build_flags: Sequence[str],
                    key_files: Sequence[Path] = ()) -> tuple[Path, int]:
    """``--versioned``: add a version for these flags (or reuse the one built for them) and point ``link`` at the
    versioned repository; returns the repository and the version."""
    from generator.repository.versions import read_index

    if not volume.is_dir():
        raise VolumeError(f"{volume} is not a directory; mount the models volume there")
    if any(flag in ("--output", "--version", "--force") or flag.startswith(("--output=", "--version="))
           for flag in build_flags):
        raise VolumeError("do not pass --output, --version or --force: versions go to the volume's versions/")
    repository, key = volume / VERSIONS_DIR, build_key(build_flags, key_files)
    index = read_index(repository)
    keys = {k: v for k, v in _read_keys(volume).items() if index is not None and v in index.versions}
    version = keys.get(key)
    if version is not None:
        logger.info("version %d of %s was built from these settings (%s); reusing it", version, repository,
                    index.versions[version].state if index else "?")
    else:
        logger.info("adding a version to %s", repository)
        if _generator("build", *build_flags, "--output", str(repository), "--version", "next") != 0:
            raise VolumeError(f"generator build failed; {repository} still holds the versions it held")
        built = read_index(repository)
        if built is None:
            raise VolumeError(f"generator build wrote no version index into {repository}")
        version = max(built.versions)
        _write_keys(volume, {**keys, key: version})
    if not _accepted(repository):
        raise VolumeError(f"generator check refused {repository} (version {version}); Triton keeps serving its "
                          "stable version")
    current = volume / link
    previous = str(current.readlink()) if current.is_symlink() else None
    if previous != VERSIONS_DIR:
        switch_link(volume, link, VERSIONS_DIR)
    removed = remove_stale(volume, {previous or "", link}, link)
    logger.info("%s -> %s, version %d (removed: %s)", current, VERSIONS_DIR, version, ", ".join(removed) or "none")
    return repository, version


def served_manifest(repository: Path) -> Path:
    """The manifest of the build Triton serves from ``repository``: the stable version's in a versioned one."""
    from generator.repository.versions import read_index

    index = read_index(repository)
    if index is None:
        return repository / "manifest.json"
    return repository / f"{index.name}_v{index.stable}" / "manifest.json"


def fill(volume: Path, link: str, build_flags: Sequence[str], *, versioned: bool,
         key_files: Sequence[Path] = ()) -> Path:
    """What the builder container does: install the build, then write the proxy's in-flight limit for the build
    now served (deploy/proxy_admission.py); returns the repository ``volume/link`` points at."""
    repository = (install_version(volume, link, build_flags, key_files)[0] if versioned
                  else install(volume, link, build_flags, key_files))
    proxy_admission.write(volume, served_manifest(repository))
    return repository


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.entrypoints.build_models", description=__doc__.splitlines()[0])
    parser.add_argument("--volume", type=Path, default=Path("/models"), help="the mounted models volume")
    parser.add_argument("--link", default="current", help="symlink Triton's --model-repository names")
    parser.add_argument("--versioned", action="store_true",
                        help="add a version to the volume's versioned repository instead of a new build-<key>")
    parser.add_argument("--key-file", type=Path, action="append", default=[],
                        help="a host file whose content joins the build key (the Jetson's L4T release file)")
    parser.add_argument("build_flags", nargs=argparse.REMAINDER, help="-- generator build flags")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="build_models: %(message)s", stream=sys.stderr)
    flags = args.build_flags[1:] if args.build_flags[:1] == ["--"] else args.build_flags
    try:
        fill(args.volume, args.link, flags, versioned=args.versioned, key_files=args.key_file)
    except (VolumeError, GeneratorError, OSError, ValueError) as exc:
        print(f"build_models: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
