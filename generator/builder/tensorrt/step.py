"""The build's TensorRT step: served ONNX -> plan on this GPU -> detector config from the plan's bindings.

Only runs where TensorRT and an NVIDIA GPU exist; everywhere else it stops before doing any work, saying
what to install and where to run. The plan is built in a child process (a builder crash kills only the
child) and a ``reproduce_build.sh`` is left next to it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from generator.builder.graph.prefix import SERVED_INPUT
from generator.builder.onnx_inspect import DetectorInfo
from generator.builder.options import BuildOptions


@dataclass(frozen=True)
class TensorRTArtifacts:
    files: dict[str, bytes]  # paths relative to the detector model folder
    overrides: dict[str, Any]  # detector template values derived from the plan
    manifest: dict[str, Any] = field(default_factory=dict)


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    batch, channels, height, width = shape
    return batch, height, width, channels


def _warmup_image(info: DetectorInfo) -> bytes:
    """A real letterboxed scene (not random bytes) so warmup takes the same paths as traffic."""
    import numpy as np

    from generator.serving.letterbox import letterbox
    from generator.synthetic import make_scene

    scene = make_scene(np.random.default_rng(1), 1280, 720)
    padded, _ = letterbox(np.ascontiguousarray(scene.image[..., ::-1]), info.image_size)
    return padded.tobytes()


def build_tensorrt_detector(served: onnx.ModelProto, info: DetectorInfo, options: BuildOptions) -> TensorRTArtifacts:
    from generator.builder.tensorrt.availability import require_tensorrt_and_gpu
    from generator.builder.tensorrt.bindings import derive_detector_bindings
    from generator.builder.tensorrt.builder import BuildSpec
    from generator.builder.tensorrt.child import REPORT_NAME, SCRIPT_NAME, SPEC_NAME, run_build_in_child
    from generator.builder.tensorrt.profiles import ShapeProfile, detector_profile
    from generator.server.embedded import cache_root

    trt = options.tensorrt
    facts = require_tensorrt_and_gpu()
    height, width = info.image_size
    nchw = detector_profile(info.input.name, info.input.shape, info.static_batch or options.max_batch,
                            trt.opt_batch, height=height, width=width)
    profile = ShapeProfile(SERVED_INPUT, _nhwc(nchw.min), _nhwc(nchw.opt), _nhwc(nchw.max))
    gpu = facts.gpu
    gpu_tag = f"{gpu.name}-sm{gpu.compute_capability}".replace(" ", "_") if gpu else "gpu"
    timing_cache = cache_root() / "tensorrt" / f"timing-{facts.tensorrt_version}-{gpu_tag}.cache"
    timing_cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tde-trt-") as tmp:
        work = Path(tmp)
        onnx.save(served, str(work / "model.onnx"))
        spec = BuildSpec(
            onnx_path=str(work / "model.onnx"),
            plan_path=str(work / "model.plan"),
            profiles=(profile,),
            workspace_bytes=int(trt.workspace_gib * (1 << 30)),
            timing_cache_path=str(timing_cache),
            optimization_level=trt.optimization_level,
            hardware_compatibility=trt.hardware_compatibility,
            version_compatible=trt.version_compatible,
        )
        report = run_build_in_child(spec, work, timeout=trt.timeout_s)
        files = {f"1/{name}": (work / name).read_bytes()
                 for name in ("model.plan", "model.onnx", SPEC_NAME, SCRIPT_NAME, REPORT_NAME)}
    bindings = derive_detector_bindings(report.tensors)
    (plan_input,) = bindings.inputs
    (plan_output,) = bindings.outputs
    files["warmup/real_image"] = _warmup_image(info)
    overrides: dict[str, Any] = {
        "max_batch_size": bindings.max_batch_size,
        "input_name": plan_input.name,
        "input_dtype": plan_input.data_type,
        "input_dims": list(plan_input.dims),
        "output_name": plan_output.name,
        "output_dtype": plan_output.data_type,
        "output_dims": list(plan_output.dims),
        "cuda_graphs": trt.cuda_graphs,
        "warmup_file": "real_image",
    }
    manifest = {
        "tensorrt_version": report.tensorrt_version,
        "cuda_version": facts.cuda_version,
        "driver_version": facts.driver_version,
        "gpu_name": gpu.name if gpu else None,
        "compute_capability": gpu.compute_capability if gpu else None,
        "triton_image": trt.triton_image,
        "profile": profile.to_json(),
        "build_seconds": round(report.build_seconds, 1),
        "hardware_compatibility": trt.hardware_compatibility,
        "version_compatible": trt.version_compatible,
    }
    return TensorRTArtifacts(files, overrides, manifest)
