"""Run a plan build in a child process: ``python -m generator.builder.stages.tensorrt.child --spec build_spec.json``.

A TensorRT builder crash (segfault, out of GPU memory) takes down only the child; the parent
reports it. ``reproduce_build.sh`` next to the plan reruns the identical build by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from generator.builder.stages.tensorrt.builder import BuildReport, BuildSpec, read_spec
from generator.builder.stages.tensorrt.errors import EngineBuildError, TensorRTError, TensorRTUnavailableError
from generator.repository.host import GpuInfo, MachineFacts

SPEC_NAME = "build_spec.json"
REPORT_NAME = "build_report.json"
SCRIPT_NAME = "reproduce_build.sh"
# The command that runs builds; a site may point it elsewhere (a wrapper that enters the TensorRT
# container, a test's stand-in). Everything the parent does around the child stays the same.
CHILD_ENV = "TRITON_DETECTION_TENSORRT_CHILD"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]


def child_command() -> list[str]:
    """argv prefix of the build child: ``$TRITON_DETECTION_TENSORRT_CHILD`` or this Python's module."""
    override = os.environ.get(CHILD_ENV, "").strip()
    if override:
        return shlex.split(override)
    return [sys.executable, "-m", "generator.builder.stages.tensorrt.child"]


def write_build_files(spec: BuildSpec, directory: Path) -> tuple[Path, Path]:
    """Write ``build_spec.json`` and ``reproduce_build.sh`` into ``directory`` (next to the plan).

    Paths inside ``directory`` are stored relative to it and the script names no path of this machine,
    so the folder can be moved as a whole (``--defer-plan`` builds the plan on another host).
    """
    directory.mkdir(parents=True, exist_ok=True)
    spec_path = directory / SPEC_NAME
    spec_path.write_text(spec_text(spec, directory))
    script = directory / SCRIPT_NAME
    script.write_text(REPRODUCE_SCRIPT)
    script.chmod(0o755)
    return spec_path, script


def spec_text(spec: BuildSpec, directory: Path | None = None) -> str:
    """``build_spec.json`` content; absolute paths inside ``directory`` become relative to it."""
    data = spec.to_json()
    for key in ("onnx_path", "plan_path", "timing_cache_path"):
        value = data.get(key)
        if value is not None and directory is not None and Path(value).is_absolute():
            data[key] = _relative_if_inside(Path(value), directory)
    return json.dumps(data, indent=2) + "\n"


REPRODUCE_SCRIPT = f"""#!/bin/sh
# Rebuild model.plan from {SPEC_NAME} exactly as `python -m generator build --target tensorrt` did, with
# this machine's TensorRT; run it on the GPU host and TensorRT release that will serve the plan.
# Add --verbose for the builder log. `python -m generator plan REPOSITORY` also records the plan in
# manifest.json; this script only builds it. Needs the project installed (pip install triton-detection-ensemble).
set -eu
cd "$(dirname "$0")"
exec "${{PYTHON:-python3}}" -m generator.builder.stages.tensorrt.child --spec {SPEC_NAME} --report {REPORT_NAME} "$@"
"""


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _failure(result: subprocess.CompletedProcess[str], what: str, hint: str) -> EngineBuildError:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    reason = lines[-1].removeprefix("error: ") if lines else f"exit status {result.returncode}"
    if result.returncode < 0:
        reason = f"the builder process died with signal {-result.returncode}"
    return EngineBuildError(f"{what}: {reason}{hint}")


def probe_builder(timeout: float = 300.0) -> MachineFacts:
    """Ask the build child whether this machine can build plans; raise saying what is missing.

    Runs in the child so that the parent never imports TensorRT and whatever replaces the child
    (``$TRITON_DETECTION_TENSORRT_CHILD``) answers for its own machine.
    """
    try:
        result = subprocess.run([*child_command(), "--probe"], env=_child_environment(), capture_output=True,
                                text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TensorRTUnavailableError(f"cannot run the TensorRT build child ({exc})") from exc
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise TensorRTUnavailableError(lines[-1].removeprefix("error: ") if lines
                                       else f"the TensorRT build child failed (exit status {result.returncode})")
    try:
        return facts_from_json(json.loads(result.stdout))
    except (ValueError, KeyError, TypeError) as exc:
        raise TensorRTUnavailableError(f"the TensorRT build child answered the probe with {result.stdout!r}") from exc


def run_build_in_child(spec: BuildSpec, directory: Path, timeout: float | None = None,
                       timing_cache_dir: Path | None = None) -> BuildReport:
    """Write the build files into ``directory``, build in a child process, return its report.

    ``timing_cache_dir`` holds one timing cache per TensorRT version and GPU (the child names it).
    """
    spec_path, script = write_build_files(spec, directory)
    report_path = directory / REPORT_NAME
    report_path.unlink(missing_ok=True)
    command = [*child_command(), "--spec", str(spec_path), "--report", str(report_path)]
    if timing_cache_dir is not None:
        command += ["--timing-cache-dir", str(timing_cache_dir)]
    try:
        result = subprocess.run(command, env=_child_environment(), capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise EngineBuildError(
            f"the TensorRT build took longer than {timeout:.0f} s; rerun {script} to watch it"
        ) from exc
    if result.returncode != 0 or not report_path.is_file():
        raise _failure(result, "TensorRT build failed", f"; rerun {script} --verbose to see the full log")
    try:
        return BuildReport.from_json(json.loads(report_path.read_text()))
    except json.JSONDecodeError as exc:
        raise EngineBuildError(f"the build report {report_path} is not JSON ({exc})") from exc


def facts_to_json(facts: MachineFacts) -> dict[str, Any]:
    return {"tensorrt_version": facts.tensorrt_version, "cuda_version": facts.cuda_version,
            "driver_version": facts.driver_version,
            "gpus": [{"name": g.name, "compute_capability": g.compute_capability} for g in facts.gpus]}


def facts_from_json(data: dict[str, Any]) -> MachineFacts:
    return MachineFacts(
        tensorrt_version=data["tensorrt_version"], cuda_version=data.get("cuda_version"),
        driver_version=data.get("driver_version"),
        gpus=tuple(GpuInfo(str(g["name"]), str(g["compute_capability"])) for g in data["gpus"]))


def _relative_if_inside(path: Path, directory: Path) -> str:
    try:
        return str(path.resolve().relative_to(directory.resolve()))
    except ValueError:
        return str(path.resolve())


def _timing_cache(directory: Path, facts: MachineFacts) -> str:
    """One cache per TensorRT version and GPU: TensorRT rejects a cache from another of either."""
    gpu = facts.gpu
    tag = f"{gpu.name}-sm{gpu.compute_capability}".replace(" ", "_").replace("/", "_") if gpu else "gpu"
    directory.mkdir(parents=True, exist_ok=True)
    return str(directory / f"timing-{facts.tensorrt_version}-{tag}.cache")


def _build(args: argparse.Namespace) -> BuildReport:
    from dataclasses import replace

    from generator.builder.stages.tensorrt.availability import require_tensorrt_and_gpu
    from generator.builder.stages.tensorrt.builder import build_plan

    facts = require_tensorrt_and_gpu()
    spec = read_spec(args.spec)
    if args.verbose:
        spec = replace(spec, verbose=True)
    if args.timing_cache_dir is not None and spec.timing_cache_path is None:
        spec = replace(spec, timing_cache_path=_timing_cache(args.timing_cache_dir, facts))
    report = build_plan(spec)
    gpu = facts.gpu
    return replace(report, gpu_name=gpu.name if gpu else None,
                   compute_capability=gpu.compute_capability if gpu else None,
                   cuda_version=facts.cuda_version, driver_version=facts.driver_version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.builder.stages.tensorrt.child", description=__doc__)
    parser.add_argument("--spec", type=Path, help="build_spec.json written by the build")
    parser.add_argument("--report", type=Path, help="where to write the build report (JSON)")
    parser.add_argument("--timing-cache-dir", type=Path, help="folder of timing caches (one per TensorRT and GPU)")
    parser.add_argument("--probe", action="store_true", help="only say whether this machine can build plans")
    parser.add_argument("--verbose", action="store_true", help="TensorRT verbose log")
    args = parser.parse_args(argv)
    if not args.probe and args.spec is None:
        parser.error("--spec is required (or --probe)")
    try:
        if args.probe:
            from generator.builder.stages.tensorrt.availability import require_tensorrt_and_gpu

            sys.stdout.write(json.dumps(facts_to_json(require_tensorrt_and_gpu())) + "\n")
            return 0
        report = _build(args)
    except TensorRTError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(report.to_json(), indent=2) + "\n"
    if args.report is not None:
        args.report.write_text(text)
    else:
        sys.stdout.write(text)
    print(
        f"built {report.plan_path} ({report.plan_bytes} bytes) in {report.build_seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
