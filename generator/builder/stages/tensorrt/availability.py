"""Can this machine build TensorRT plans? A build without TensorRT and a GPU stops here.

A plan only loads on the TensorRT version and GPU architecture it was built for, so a build without both
says what to install and where to run, instead of faking a plan. The facts themselves are the host's
(:mod:`generator.repository.host`): ``check`` reads the same ones.
"""

from __future__ import annotations

from generator.builder.stages.tensorrt.errors import TensorRTUnavailableError
from generator.repository.host import MachineFacts, query_gpus, tensorrt_problem, tensorrt_version

INSTALL_HINT = (
    "run the build on a host with an NVIDIA GPU and driver, inside the NGC TensorRT container of the "
    "same release as the Triton image that will serve the plan (e.g. nvcr.io/nvidia/tensorrt:26.08-py3 "
    "for nvcr.io/nvidia/tritonserver:26.08-py3), or after `pip install tensorrt` "
    "(NVIDIA's index: --extra-index-url https://pypi.nvidia.com) with a TensorRT matching that Triton release; "
    "without a GPU, use --target onnxruntime or --target embedded, or --defer-plan to write the repository "
    "now and build the plan on the GPU host with `python -m generator plan DIR`"
)


def require_tensorrt_and_gpu() -> MachineFacts:
    """Return the machine facts, or raise :class:`TensorRTUnavailableError` saying what is missing."""
    gpus, cuda, driver, gpu_problem = query_gpus()
    trt_problem = tensorrt_problem()
    problems = [p for p in (trt_problem, gpu_problem) if p is not None]
    if problems:
        raise TensorRTUnavailableError(
            f"cannot build a TensorRT plan on this machine: {'; and '.join(problems)}. To fix: {INSTALL_HINT}."
        )
    return MachineFacts(
        tensorrt_version=tensorrt_version(), cuda_version=cuda, driver_version=driver, gpus=gpus
    )
