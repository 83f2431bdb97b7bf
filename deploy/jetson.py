"""The Jetson profile's values: the iGPU Triton image, the on-device plan build and the serving command.

One image serves both services of the profile: NVIDIA's JetPack Triton container
(``nvcr.io/nvidia/tritonserver:<release>-py3-igpu``) with the project installed. Its builder runs
``generator build --target tensorrt`` on the Jetson itself at first start, so the plan is made by the TensorRT
and the GPU that will load it (a plan moves to neither another TensorRT nor another GPU); ``generator check``
refuses a plan of another TensorRT, and the build key also digests the host's L4T release file, so a JetPack
upgrade builds a new plan even where the TensorRT version string stayed the same.

Defaults follow the Jetson practice the project's articles describe: static shapes (batch 1, the ONNX's own input
size or ``jetson_image_size`` for the camera), FP16, INT8 only with the site's calibration images, one instance
of each step (the GPU shares the board's RAM), a small builder workspace.
"""

from __future__ import annotations

import dataclasses

from deploy import commands, sizing
from deploy.settings import DETECTOR_ONNX_PATH, Settings, build_options, jetson_image_size
from generator.builder.spec.declarations import to_flags
from generator.builder.spec.options import BuildOptions

BASE_REPOSITORY = "nvcr.io/nvidia/tritonserver"
# The host's L4T (Jetson Linux) release line, e.g. "# R36 (release), REVISION: 4.3, ...": JetPack's BSP version.
HOST_L4T_FILE = "/etc/nv_tegra_release"
L4T_MOUNT = "/etc/host-l4t/nv_tegra_release"
# The host's tegrastats and nvpmodel, mounted read-only into the Jetson Triton service for its telemetry
# (generator/server/jetson_metrics.py); the NVIDIA container runtime mounts the Tegra device nodes.
TEGRASTATS = "/usr/bin/tegrastats"
NVPMODEL = "/usr/sbin/nvpmodel"
NVPMODEL_CONF = "/etc/nvpmodel.conf"
JETSON_METRICS_PATH = "/opt/deploy/jetson_metrics.py"
# Two of each Python step (with one, Triton's batcher can leave a request waiting behind a free instance:
# generator/builder/stages/config/stranding.py); one TensorRT detector, for the board's shared memory.
INSTANCES = (2, 1, 2)


def base_image(settings: Settings) -> str:
    """The JetPack Triton container of ``jetson_release`` (its digest comes from JETSON_TRITON_DIGEST)."""
    return f"{BASE_REPOSITORY}:{settings.jetson_release}-py3-igpu"


def image_tag(settings: Settings) -> str:
    return f"{settings.jetson_release}-igpu-{settings.project_version}"


def jetson_build_options(settings: Settings) -> BuildOptions:
    """The GPU stack's build with the Jetson's static, FP16-by-default plan; validated by the generator itself."""
    gpu = build_options(settings, "tensorrt")
    tensorrt = dataclasses.replace(gpu.tensorrt, triton_image=base_image(settings), opt_batch=settings.jetson_max_batch,
                                   workspace_gib=settings.jetson_workspace_mib / 1024)
    return dataclasses.replace(gpu, precision=settings.jetson_build_precision, max_batch=settings.jetson_max_batch,
                               image_size=jetson_image_size(settings), instances=INSTANCES, preprocess_device="cpu",
                               tensorrt=tensorrt)


def build_args(settings: Settings) -> list[str]:
    always = (*commands.SPELLED_OUT, "tensorrt.triton_image", "tensorrt.opt_batch", "tensorrt.workspace_gib")
    return ["--onnx", DETECTOR_ONNX_PATH, *to_flags(jetson_build_options(settings), always=always)]


def builder_command(settings: Settings) -> list[str]:
    """The Jetson builder's arguments (entry point ``python3 -m deploy.entrypoints.build_models``)."""
    return [f"--volume={commands.MODELS_VOLUME}", f"--link={commands.CURRENT_LINK}", "--versioned",
            f"--key-file={L4T_MOUNT}", "--", *build_args(settings)]


def serve_command(settings: Settings, token: str) -> list[str]:
    """The GPU stack's serving command; Triton's DCGM GPU metrics do not exist on Jetson (jetson_metrics does it)."""
    args = commands.serve_command(settings, gpu=True, token=token)
    return [("--allow-gpu-metrics=false" if arg == "--allow-gpu-metrics=true" else arg) for arg in args]


def jetson_sizing_settings(settings: Settings) -> Settings:
    """The settings the Jetson build's buffers follow: its batch and one instance per Python step."""
    return dataclasses.replace(settings, max_batch=settings.jetson_max_batch, python_instances=INSTANCES[0])


def shm(settings: Settings) -> sizing.ShmBreakdown:
    return sizing.shm_breakdown(jetson_sizing_settings(settings), gpu=True)
