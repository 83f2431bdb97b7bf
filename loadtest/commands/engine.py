"""``engine``: the detector engine alone, outside Triton: a repository's served graph at fixed batch sizes.

Prints one JSON object (and writes it to ``--out``): images per second and the median batch time of ONNX Runtime
on the served graph with the served settings, from GPU memory and from host arrays, and of the project's runner as
the served step runs it (loadtest/engine.py). It runs in the embedded server's stub environment for the repository
(``generator serve --prepare`` made it), where the served detector's ONNX Runtime (and CuPy) live; ``--here`` runs
in this interpreter instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import LoadTestError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repository", type=Path, required=True, help="built model repository")
    parser.add_argument("--model", default="yolo", help="ensemble name (its detector is <model>_detector)")
    parser.add_argument("--batches", default="1,8,32", help="batch sizes (comma-separated)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds each measurement runs")
    parser.add_argument("--device-id", type=int, default=0, help="GPU of a GPU repository")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--here", action="store_true",
                        help="run in this interpreter, not in the stub environment of the repository")


def _batches(text: str) -> list[int]:
    try:
        sizes = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LoadTestError(f"--batches takes comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise LoadTestError(f"--batches takes positive integers, got {text!r}")
    return sizes


def _in_stub_environment(args: argparse.Namespace) -> int:
    """Run this command again with the repository's stub environment, the project's packages on its path."""
    from generator.cache import cache_root
    from generator.server.environments import Environment, is_verified, stub_environment_for

    locked = stub_environment_for([args.repository])
    root = locked.location(cache_root())
    if not is_verified(root, locked):
        raise LoadTestError(f"the {locked.name} environment is not prepared: run python -m generator serve --prepare "
                            f"(--from-archive FILE offline) first, or pass --here")
    packages = Path(__file__).resolve().parents[2]
    argv = ["-m", "loadtest", "engine", "--repository", str(args.repository.resolve()), "--model", args.model,
            "--batches", args.batches, "--seconds", str(args.seconds), "--device-id", str(args.device_id), "--here"]
    if args.out is not None:
        argv += ["--out", str(args.out.resolve())]
    with tempfile.TemporaryDirectory(prefix="tde-engine-") as tmp:
        for package in ("generator", "loadtest"):  # only these two: the rest of this environment has numpy 2
            (Path(tmp) / package).symlink_to(packages / package)
        env = {**os.environ, "PYTHONPATH": tmp, "PYTHONNOUSERSITE": "1"}
        return subprocess.run([str(Environment(root).python), *argv], env=env, check=False).returncode


def run(args: argparse.Namespace) -> int:
    sizes = _batches(args.batches)
    if not args.here:
        return _in_stub_environment(args)
    from ..engine import detector_config, engine_rates

    path, parameters, dims = detector_config(args.repository, args.model)
    results = {"repository": args.repository.name, "model": args.model, "python": sys.version.split()[0],
               **engine_rates(path, parameters, dims, sizes, args.seconds, args.device_id)}
    text = json.dumps(results, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0
