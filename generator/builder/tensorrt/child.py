"""Run a plan build in a child process: ``python -m generator.builder.tensorrt.child --spec build_spec.json``.

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

from generator.builder.tensorrt.builder import BuildReport, BuildSpec, read_spec
from generator.builder.tensorrt.errors import EngineBuildError, TensorRTError

SPEC_NAME = "build_spec.json"
REPORT_NAME = "build_report.json"
SCRIPT_NAME = "reproduce_build.sh"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]


def write_build_files(spec: BuildSpec, directory: Path) -> tuple[Path, Path]:
    """Write ``build_spec.json`` and ``reproduce_build.sh`` into ``directory`` (next to the plan).

    Paths inside ``directory`` are stored relative to it, so the folder can be moved as a whole.
    """
    directory.mkdir(parents=True, exist_ok=True)
    data = spec.to_json()
    for key in ("onnx_path", "plan_path", "timing_cache_path"):
        value = data.get(key)
        if value is not None:
            data[key] = _relative_if_inside(Path(value), directory)
    spec_path = directory / SPEC_NAME
    spec_path.write_text(json.dumps(data, indent=2) + "\n")
    script = directory / SCRIPT_NAME
    script.write_text(
        "#!/bin/sh\n"
        "# Rebuild the TensorRT plan exactly as `python -m generator build --target tensorrt` did.\n"
        "# Run on the GPU host and TensorRT version that will serve it; add --verbose for the builder log.\n"
        "set -eu\n"
        'cd "$(dirname "$0")"\n'
        f'PYTHONPATH={shlex.quote(str(_PROJECT_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}" \\\n'
        f'  exec {shlex.quote(sys.executable)} -m generator.builder.tensorrt.child --spec {SPEC_NAME} --report {REPORT_NAME} "$@"\n'
    )
    script.chmod(0o755)
    return spec_path, script


def run_build_in_child(spec: BuildSpec, directory: Path, timeout: float | None = None) -> BuildReport:
    """Write the build files into ``directory``, build in a child process, return its report."""
    spec_path, script = write_build_files(spec, directory)
    report_path = directory / REPORT_NAME
    report_path.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    command = [
        sys.executable,
        "-m",
        "generator.builder.tensorrt.child",
        "--spec",
        str(spec_path),
        "--report",
        str(report_path),
    ]
    try:
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise EngineBuildError(
            f"the TensorRT build took longer than {timeout:.0f} s; rerun {script} to watch it"
        ) from exc
    if result.returncode != 0 or not report_path.is_file():
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {result.returncode}"
        if result.returncode < 0:
            reason = f"the builder process died with signal {-result.returncode}"
        raise EngineBuildError(
            f"TensorRT build failed: {reason}; rerun {script} --verbose to see the full log"
        )
    return BuildReport.from_json(json.loads(report_path.read_text()))


def _relative_if_inside(path: Path, directory: Path) -> str:
    try:
        return str(path.resolve().relative_to(directory.resolve()))
    except ValueError:
        return str(path.resolve())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.builder.tensorrt.child", description=__doc__)
    parser.add_argument("--spec", type=Path, required=True, help="build_spec.json written by the build")
    parser.add_argument("--report", type=Path, help="where to write the build report (JSON)")
    parser.add_argument("--verbose", action="store_true", help="TensorRT verbose log")
    args = parser.parse_args(argv)
    try:
        from dataclasses import replace

        from generator.builder.tensorrt.availability import require_tensorrt_and_gpu
        from generator.builder.tensorrt.builder import build_plan

        require_tensorrt_and_gpu()
        spec = read_spec(args.spec)
        if args.verbose:
            spec = replace(spec, verbose=True)
        report = build_plan(spec)
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
