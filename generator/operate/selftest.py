"""The first command on a new GPU host: build the demo as an FP16 plan here, serve it, compare with FP32.

It proves the whole TensorRT path on this machine in one go: TensorRT builds a plan from the served graph,
a real ``tritonserver`` (the NGC image's: the embedded Triton has only the Python backend and cannot load
plans) loads it with the flags the manifest asks for, and the served detections score within the FP16
accuracy gate of the FP32 ONNX Runtime reference on the demo's labelled synthetic scenes.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from generator.server.embedded import EmbeddedServer, ServerInstall
from generator.server.ports import free_ports

logger = logging.getLogger(__name__)
NGC_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    served_map: float  # mAP@0.5:0.95 of the served ensemble
    reference_map: float  # of the FP32 ONNX Runtime reference, same images and thresholds
    max_drop_points: float
    images: int

    @property
    def drop_points(self) -> float:
        return (self.reference_map - self.served_map) * 100

    def summary(self) -> str:
        state = "PASSED" if self.passed else "FAILED"
        return (f"selftest {state}: served mAP@0.5:0.95 {self.served_map:.4f} vs FP32 ONNX Runtime "
                f"{self.reference_map:.4f} (drop {self.drop_points:.2f} pt, allowed {self.max_drop_points:.2f}) "
                f"on {self.images} images")


def find_tritonserver(explicit: Path | None = None) -> Path | None:
    """``explicit``, else ``tritonserver`` on PATH, else the NGC image's standard location."""
    if explicit is not None:
        return explicit if explicit.is_file() else None
    found = shutil.which("tritonserver")
    if found:
        return Path(found)
    return NGC_TRITONSERVER if NGC_TRITONSERVER.is_file() else None


def prerequisites(tritonserver: Path | None) -> list[str]:
    """Everything this machine lacks for the selftest, each with what to do about it."""
    from generator.repository.host import query_gpus, tensorrt_problem, tensorrt_version
    from generator.repository.libnvinfer import find_tensorrt_library

    problems = []
    trt_problem = tensorrt_problem()
    if trt_problem:
        problems.append(f"{trt_problem} (pip install tensorrt with the version of the server's libnvinfer, "
                        "or run in the NGC Triton image after installing it)")
    _, _, _, gpu_problem = query_gpus()
    if gpu_problem:
        problems.append(f"{gpu_problem} (run on a host with an NVIDIA GPU and driver, with --gpus all in Docker)")
    if tritonserver is None:
        problems.append("no tritonserver with the TensorRT backend found (the embedded Triton has only the Python "
                        "backend and cannot load plans): run in nvcr.io/nvidia/tritonserver:<release>-py3 or pass "
                        "--tritonserver PATH")
    elif not (tritonserver.parent.parent / "backends" / "tensorrt").is_dir():
        problems.append(f"{tritonserver} has no backends/tensorrt next to it; use the NGC Triton image's server")
    library = find_tensorrt_library()
    builder = tensorrt_version() if trt_problem is None else None
    if library is not None and builder is not None and library.version != ".".join(builder.split(".")[:3]):
        problems.append(f"the tensorrt Python package is {builder} but the server's libnvinfer ({library.path}) "
                        f"is {library.version}: plans load only with the TensorRT that built them; "
                        f"pip install tensorrt=={library.version}.*")
    return problems


class ExternalServer(EmbeddedServer):
    """A ``tritonserver`` binary already on this machine (the NGC image's), on loopback and free ports."""

    def __init__(self, binary: Path, repository: Path, log_file: Path, extra_args: tuple[str, ...] = (),
                 environment: dict[str, str] | None = None) -> None:
        http, grpc, metrics = free_ports(3)
        super().__init__(repository, http, grpc, metrics, log_file, extra_args)
        self.binary = binary
        self.extra_environment = environment or {}

    def start(self) -> None:
        install = ServerInstall(self.binary.parent.parent)
        # The embedded command line without its --backend-directory: the NGC server knows its own.
        own = f"--backend-directory={install.backends}"
        command = [str(self.binary), *(a for a in self.command(install)[1:] if a != own)]
        log = self.log_file.open("ab") if self.log_file else None
        self.process = subprocess.Popen(command, env={**os.environ, **self.extra_environment}, stdout=log or None,
                                        stderr=subprocess.STDOUT if log else None, start_new_session=True)


def serve_and_compare(server: ExternalServer, reference_onnx: Path, model: str, precision: str,
                      images: int = 64, ready_timeout_s: float = 600.0) -> Verdict:
    """Start ``server``, run the demo's control scenes through ensemble ``model``, score against FP32."""
    from generator.evaluation.gate import DEFAULT_MAX_DROP, synthetic_control_set
    from generator.model.onnx_inspect import inspect_onnx
    from generator.operate.served_check import served_vs_reference
    from generator.repository.manifest import read_manifest

    manifest = read_manifest(server.repository)
    thresholds = manifest.thresholds
    info = inspect_onnx(reference_onnx)
    control = synthetic_control_set(images)
    server.start()
    try:
        server.wait_ready(ready_timeout_s)
        served, local = served_vs_reference(f"grpc://{server.grpc_url}", model, reference_onnx, info, control,
                                            thresholds.conf, thresholds.iou, thresholds.max_detections)
    finally:
        server.stop()
    max_drop = DEFAULT_MAX_DROP[precision]
    drop = (local.map50_95 - served.map50_95) * 100
    return Verdict(drop <= max_drop, served.map50_95, local.map50_95, max_drop, images)


def run_selftest(workdir: Path, tritonserver: Path, images: int = 64) -> Verdict:
    """Build the demo as an FP16 plan into ``workdir``, serve it with ``tritonserver``, compare with FP32."""
    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import BuildOptions
    from generator.demo import DEMO_ONNX
    from generator.repository.manifest import server_flags

    repository = workdir / "model_repository"
    logger.info("Building the demo detector as an FP16 TensorRT plan on this GPU into %s ...", repository)
    result = build_repository(DEMO_ONNX, repository, BuildOptions(target="tensorrt", precision="fp16"), force=True)
    flags = tuple(server_flags(result.manifest))
    log = workdir / "tritonserver.log"
    logger.info("Serving it with %s (log: %s) ...", tritonserver, log)
    server = ExternalServer(tritonserver, repository, log, flags)
    return serve_and_compare(server, DEMO_ONNX, "yolo", "fp16", images)
