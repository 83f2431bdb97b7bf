"""What the GPU steps need where Triton runs, and a check that it is there.

The build records ``REQUIREMENTS`` in the manifest (``preprocess.requirements``) for ``--preprocess-device gpu``
and ``DETECTOR_REQUIREMENTS`` (``detector.requirements``) for ``--target embedded --device gpu``; deploy installs
the preprocess ones into the Triton image; ``python -m generator check`` calls ``manifest_problems`` so a
repository whose steps run on the GPU is refused on a machine that could not load them, with one line per problem.

CuPy stays on 13.x: CuPy 14 is built for numpy 2, and the Triton 2.51 Python-backend stub needs numpy < 2
where it deserialises BYTES inputs (measured on the H200: docs/results/gpu/). The CUDA 13 builds match NGC
Triton 26.08 (CUDA 13); a CUDA 12 host takes ``cupy-cuda12x`` and ``nvidia-nvimgcodec-cu12`` instead.
onnxruntime-gpu 1.31 is the newest ONNX Runtime with the CUDA provider on PyPI (a CUDA 13 and cuDNN 9 build);
it replaces the CPU ``onnxruntime`` package (both install the module ``onnxruntime``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

REQUIREMENTS = ("cupy-cuda13x>=13.6,<14", "nvidia-nvimgcodec-cu13[nvjpeg]>=0.9,<0.10")
# (module, lowest version, first version not accepted): what the serving process imports.
Modules = tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
MODULES: Modules = (("cupy", (13, 6), (14, 0)), ("nvidia.nvimgcodec", (0, 9), (0, 10)), ("numpy", (1, 22), (2, 0)))
# The embedded server's Python models run in its locked stub environment (generator/server/locks/stub-gpu.txt has
# these packages); NGC's image runs them in the image's own Python, where the extra is installed.
EMBEDDED_HINT = "the embedded server: python -m generator serve --prepare --stub-env gpu makes its stub environment"
INSTALL = (f"{EMBEDDED_HINT}; NGC's Triton image: pip install '.[gpu]' "
           "(or the packages in the manifest's preprocess.requirements)")
DETECTOR_REQUIREMENTS = ("onnxruntime-gpu>=1.31.1,<1.32",)
DETECTOR_MODULES: Modules = (("onnxruntime", (1, 31), (1, 32)), ("numpy", (1, 22), (2, 0)))
DETECTOR_INSTALL = (f"{EMBEDDED_HINT}; elsewhere: pip uninstall -y onnxruntime && pip install '.[gpu-detector]' "
                    "(onnxruntime-gpu replaces the CPU package; the CUDA 13 and cuDNN 9 libraries must be on the "
                    "library path)")
CUDA_PROVIDER = "CUDAExecutionProvider"
# A one-node ONNX model (Identity, float [1], opset 13): what the check opens a CUDA session on.
PROBE_MODEL = (b'\x08\x08:;\n\x10\n\x01x\x12\x01y"\x08Identity\x12\x05probeZ\x0f\n\x01x\x12\n\n\x08\x08\x01'
               b'\x12\x04\n\x02\x08\x01b\x0f\n\x01y\x12\n\n\x08\x08\x01\x12\x04\n\x02\x08\x01B\x04\n\x00\x10\r')


def record(device: str) -> dict[str, Any]:
    """The manifest's ``preprocess`` entry."""
    return {"device": device, "requirements": list(REQUIREMENTS) if device == "gpu" else []}


def detector_record(device: str, python_backend: bool) -> dict[str, Any]:
    """The manifest's ``detector`` device and what the Python-backend detector imports on it (a platform
    detector on the GPU runs in Triton's own ONNX Runtime or TensorRT backend and needs nothing here)."""
    needed = device == "gpu" and python_backend
    return {"device": device, "requirements": list(DETECTOR_REQUIREMENTS) if needed else []}


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def module_problems(importer: Callable[[str], Any] = importlib.import_module, modules: Modules = MODULES,
                    step: str = "the GPU preprocess", install: str = INSTALL) -> list[str]:
    """One line per missing module or version outside what the GPU step runs with."""
    problems = []
    for name, low, high in modules:
        try:
            module = importer(name)
        except Exception as exc:  # noqa: BLE001 -- CuPy raises more than ImportError without its CUDA libraries
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no message"
            problems.append(f"{step} needs {name}, which did not import here ({type(exc).__name__}: "
                            f"{detail}); {install}")
            continue
        found = str(getattr(module, "__version__", "0"))
        if not low <= _version(found)[: len(low)] < high:
            wanted = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
            problems.append(f"{step} needs {name} {wanted}, this machine has {found}; {install}")
    return problems


def device_problems(importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """Empty when CuPy sees a CUDA device and nvImageCodec can create a GPU JPEG decoder on it."""
    from .decode import DecoderOptions, GpuJpegDecoder
    from .runtime import GpuUnavailableError

    cupy = importer("cupy")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 -- CUDARuntimeError when there is no driver or device
        count, reason = 0, f" ({exc})"
    else:
        reason = ""
    if count < 1:
        return [f"the GPU preprocess needs a CUDA device, CuPy sees none{reason}; serve on a GPU host "
                "(--gpus / the NVIDIA device plugin) or rebuild with --preprocess-device cpu"]
    try:
        GpuJpegDecoder(DecoderOptions())
    except GpuUnavailableError:
        try:  # what the preprocess falls back to on a GPU without a hardware JPEG engine
            GpuJpegDecoder(DecoderOptions(backend="cuda"))
        except GpuUnavailableError as exc:
            return [f"{exc}; install nvImageCodec's nvJPEG extension ({INSTALL})"]
    return []


def cuda_session_problems(onnxruntime: Any) -> list[str]:
    """Empty when this ONNX Runtime opens a session on the CUDA provider on GPU 0."""
    try:
        session = onnxruntime.InferenceSession(PROBE_MODEL, providers=[CUDA_PROVIDER])
        active = list(session.get_providers())
    except Exception as exc:  # noqa: BLE001 -- no GPU or a missing CUDA library, as ONNX Runtime words it
        active, reason = [], f": {str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}"
    else:
        reason = ""
    if CUDA_PROVIDER in active:
        return []
    return [f"the GPU detector could not open a session on the CUDA provider on GPU 0{reason} (it ran on "
            f"{active or 'none'}); serve on a GPU host with the CUDA 13 and cuDNN 9 libraries on the library path, "
            "or rebuild with --device cpu"]


def detector_problems(manifest_extra: Mapping[str, Any],
                      importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """What stops this machine from serving a repository built with ``--target embedded --device gpu``."""
    entry = manifest_extra.get("detector") or {}
    if not entry.get("requirements"):
        return []
    step = "the GPU detector"
    try:
        onnxruntime = importer("onnxruntime")
    except Exception:  # noqa: BLE001 -- module_problems words it
        return module_problems(importer, DETECTOR_MODULES, step, DETECTOR_INSTALL)
    available = list(onnxruntime.get_available_providers())
    if CUDA_PROVIDER not in available:
        return [f"{step} needs ONNX Runtime's CUDA provider; onnxruntime {onnxruntime.__version__} here has "
                f"{', '.join(available)} (the CPU package?); {DETECTOR_INSTALL}"]
    problems = module_problems(importer, DETECTOR_MODULES, step, DETECTOR_INSTALL)
    return problems or cuda_session_problems(onnxruntime)


def preprocess_problems(manifest_extra: Mapping[str, Any],
                        importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """What stops this machine from serving a repository built with ``--preprocess-device gpu``."""
    entry = manifest_extra.get("preprocess") or {}
    if entry.get("device") != "gpu":
        return []
    problems = module_problems(importer)
    return problems or device_problems(importer)


def manifest_problems(manifest_extra: Mapping[str, Any],
                      importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """What stops this machine from serving the repository's GPU steps (detector, preprocess); [] otherwise."""
    return detector_problems(manifest_extra, importer) + preprocess_problems(manifest_extra, importer)
