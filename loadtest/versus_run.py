"""Running ``versus``: the sides of one machine (or pinning), and one pinned build-serve-measure per core count."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .bare_detector import BareDetector
from .breakdown import breakdown
from .closed_loop import client_factory
from .errors import LoadTestError
from .machine import machine_info
from .provenance import repository_record
from .reference import InProcessPipeline, Thresholds, ultralytics_missing
from .ultralytics_procs import PredictSettings, UltralyticsProcesses
from .versus import (
    DETECTOR,
    REFERENCE,
    SERVED,
    ULTRALYTICS,
    VARIANT,
    Side,
    VersusSettings,
    process_cpu_s,
    run_rounds,
)

logger = logging.getLogger(__name__)
TIMEOUT_S = 60.0


def free_ports(count: int) -> list[int]:
    """Ports the OS has just handed out on loopback (closed again before the server binds them)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def build_repository(onnx: Path | None, output: Path, extra: list[str]) -> Path:
    """The default build of ``onnx`` (plus ``extra`` flags), made on the cores this process may use."""
    if onnx is None or not onnx.is_file():
        raise LoadTestError(f"ONNX file not found: {onnx}")
    command = [sys.executable, "-m", "generator", "build", "--onnx", str(onnx), "--output", str(output), *extra]
    logger.info("building %s for %d cores ...", onnx.name, len(os.sched_getaffinity(0)))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LoadTestError(f"the build failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return output


def variant_model(model: str) -> str:
    """The ensemble name of the --variant-arg build, served beside ``model``."""
    return f"{model}_variant"


def _manifest(repository: Path) -> Any:
    from generator.errors import GeneratorError
    from generator.repository.manifest import read_manifest

    try:
        return read_manifest(repository)
    except GeneratorError as exc:
        raise LoadTestError(f"{repository}: {exc}") from exc


def _reference_onnx(args: argparse.Namespace, manifest: Any) -> Path:
    if args.onnx is not None:
        return Path(args.onnx)
    source = Path(manifest.source_onnx_path or "")
    if not source.is_file():
        raise LoadTestError("the repository's source ONNX is not here: give the exported model with --onnx")
    return source


def _ultralytics(args: argparse.Namespace, onnx: Path, thresholds: Thresholds, image_size: tuple[int, int],
                 about: dict[str, Any]) -> UltralyticsProcesses | None:
    """Ultralytics' predict in one process per stream, or None (and why, in ``about``)."""
    missing = "left out (--no-ultralytics)" if args.no_ultralytics else ultralytics_missing()
    if missing is None:
        settings = PredictSettings(str(onnx), thresholds.conf, thresholds.iou, thresholds.max_detections, image_size)
        ultra = UltralyticsProcesses(onnx, settings)
        about[ULTRALYTICS] = {"version": ultra.version, "models": "one YOLO(onnx) per stream, each in its own process",
                              "session": "ONNX Runtime's defaults but one intra-op thread per core of the pinning"}
        return ultra
    about[ULTRALYTICS] = {"absent": missing}
    logger.info("Ultralytics column absent: %s", missing)
    return None


def sides_for(args: argparse.Namespace, grpc: str, repository: Path, server_pid: int | None = None,
              images: list[bytes] | None = None) -> tuple[list[Side], dict[str, Any], UltralyticsProcesses | None]:
    """The served side, the in-process reference, the bare detector, and Ultralytics' predict where it can run."""
    manifest = _manifest(repository)
    onnx = _reference_onnx(args, manifest)
    t = manifest.thresholds
    thresholds = Thresholds(t.conf, t.iou, t.max_detections)
    reference = InProcessPipeline(onnx, thresholds)
    server_cpu = (lambda: process_cpu_s(server_pid, tree=True)) if server_pid else None
    sides = [Side(SERVED, lambda: client_factory("grpc", grpc, args.model, TIMEOUT_S), server_cpu)]
    about: dict[str, Any] = {}
    if args.variant_arg:  # the second build, on the same server (commands/versus.py, served)
        variant = variant_model(args.model)
        sides.append(Side(VARIANT, lambda: client_factory("grpc", grpc, variant, TIMEOUT_S), server_cpu))
        about[VARIANT] = {"model": variant, "build_args": list(args.variant_arg)}
    sides.append(Side(REFERENCE, reference.factory, process_cpu_s))
    about |= {
        "reference": {"onnx": onnx.name, "layout": reference.info.layout, "image_size": list(reference.info.image_size),
                      "session": "ONNX Runtime, one intra-op thread per core of the pinning and none outside it, "
                                 "spinning, shared by the streams",
                      "intra_op_threads": reference.threads, "decode": "cv2.imdecode, full resolution",
                      "thresholds": asdict(thresholds)},
    }
    if images is not None:
        try:
            bare = BareDetector(repository, args.model, images)
        except LoadTestError as exc:  # e.g. a TensorRT detector: the column is left out, saying why
            about[DETECTOR] = {"absent": str(exc)}
        else:
            sides.append(Side(DETECTOR, bare.factory, process_cpu_s))
            about[DETECTOR] = bare.about()
    ultra = _ultralytics(args, onnx, thresholds, reference.info.image_size, about)
    if ultra is not None:
        sides.append(Side(ULTRALYTICS, ultra.factory, ultra.cpu_s))
    return sides, about, ultra


def measure(args: argparse.Namespace, served_at: tuple[Path, str, str, int | None, tuple[str, Path] | None],
            settings: VersusSettings, images: list[bytes]) -> dict[str, Any]:
    """Paired rounds on this process's cores against one server (``served_at``: repository, gRPC and metrics
    addresses, the server's process id when it runs here, its HTTP address and trace file when traced here),
    then the decomposition at one stream and at the most streams."""
    repository, grpc, metrics, pid, trace = served_at
    sides, about, ultra = sides_for(args, grpc, repository, pid, images)
    logger.info("versus: %s, %d rounds of %s s windows at %s streams, on %d cores", ", ".join(s.name for s in sides),
                settings.rounds, settings.window_s, ",".join(map(str, settings.streams)), len(os.sched_getaffinity(0)))
    machine = machine_info()
    try:
        rounds = run_rounds(sides, images, settings, metrics)
        steps = breakdown(sides[0], ultra, trace, args.model, images, settings, metrics)
    finally:
        if ultra is not None:
            ultra.close()
    machine["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    return {"machine": machine, "cores": len(os.sched_getaffinity(0)),
            "server": {"repository": repository_record(repository), "grpc": "external" if args.url else "embedded"},
            "images": {"count": len(images), "avg_bytes": round(sum(map(len, images)) / len(images))},
            **about, **rounds, "breakdown": steps}


def _cpu_list(count: int) -> str:
    usable = sorted(os.sched_getaffinity(0))
    if count > len(usable):
        raise LoadTestError(f"--cores asks for {count} cores, this process may use {len(usable)}")
    return ",".join(map(str, usable[:count]))


def _child_args(args: argparse.Namespace, cores: int, out: Path) -> list[str]:
    words = ["-m", "loadtest", "versus", "--onnx", str(args.onnx), "--model", args.model,
             "--streams", args.streams, "--rounds", str(args.rounds), "--window", str(args.window),
             "--size", args.size, "--label", f"{cores}c", "--results-dir", str(out)]
    words += [f"--build-arg={arg.replace('{cores}', str(cores))}" for arg in args.build_arg]
    words += [f"--variant-arg={arg.replace('{cores}', str(cores))}" for arg in args.variant_arg]
    if args.images:
        words += ["--images", str(args.images)]
    if args.no_ultralytics:
        words.append("--no-ultralytics")
    return words


def measure_cores(args: argparse.Namespace, counts: tuple[int, ...], out: Path) -> dict[str, Any]:
    """One child per core count, pinned with taskset: it builds, serves and measures on those cores alone."""
    per_core: dict[str, Any] = {}
    for cores in counts:
        cpus = _cpu_list(cores)
        logger.info("== %d cores (CPUs %s) ==", cores, cpus)
        command = ["taskset", "-c", cpus, sys.executable, *_child_args(args, cores, out)]
        began = time.monotonic()
        if subprocess.run(command, check=False).returncode != 0:
            raise LoadTestError(f"the {cores}-core run failed (its output is above)")
        (result,) = sorted(out.glob(f"*-{cores}c.json"))[-1:]
        per_core[str(cores)] = {**json.loads(result.read_text()), "wall_s": round(time.monotonic() - began, 1)}
    return {"machine": machine_info(), "per_core": per_core}
