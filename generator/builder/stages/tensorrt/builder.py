"""Build a serialized TensorRT plan from a precision ONNX with the TensorRT Python API.

Precision lives in the ONNX (FP16 casts or INT8 Q/DQ), so the network is created strongly typed,
the only mode TensorRT 11 has.
``tensorrt`` is imported inside the functions; run builds through :mod:`generator.builder.stages.tensorrt.child`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from generator.builder.stages.tensorrt.bindings import TensorDesc, describe_engine
from generator.builder.stages.tensorrt.errors import EngineBuildError
from generator.builder.stages.tensorrt.profiles import ShapeProfile

if TYPE_CHECKING:
    import tensorrt as trt

HardwareCompatibility = Literal["none", "ampere_plus", "same_compute_capability"]
HARDWARE_COMPATIBILITY: tuple[HardwareCompatibility, ...] = ("none", "ampere_plus", "same_compute_capability")


@dataclass(frozen=True)
class BuildSpec:
    """Everything one plan build needs; serialised to ``build_spec.json`` for the child process.

    Relative paths are resolved against the directory of the spec file.
    """

    onnx_path: str
    plan_path: str
    profiles: tuple[ShapeProfile, ...]
    workspace_bytes: int = 4 << 30
    timing_cache_path: str | None = None
    optimization_level: int = 3
    hardware_compatibility: HardwareCompatibility = "none"
    version_compatible: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        if not self.profiles:
            raise EngineBuildError("a plan build needs at least one optimization profile")
        if not 0 <= self.optimization_level <= 5:
            raise EngineBuildError(f"builder optimization level must be 0..5, got {self.optimization_level}")
        if self.workspace_bytes < 1 << 20:
            raise EngineBuildError(f"workspace must be at least 1 MiB, got {self.workspace_bytes} bytes")
        if self.hardware_compatibility not in HARDWARE_COMPATIBILITY:
            raise EngineBuildError(f"unknown hardware compatibility {self.hardware_compatibility!r}; "
                                   f"choose one of {', '.join(HARDWARE_COMPATIBILITY)}")

    def to_json(self) -> dict[str, Any]:
        return {
            "onnx_path": self.onnx_path,
            "plan_path": self.plan_path,
            "profiles": [p.to_json() for p in self.profiles],
            "workspace_bytes": self.workspace_bytes,
            "timing_cache_path": self.timing_cache_path,
            "optimization_level": self.optimization_level,
            "hardware_compatibility": self.hardware_compatibility,
            "version_compatible": self.version_compatible,
            "verbose": self.verbose,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], base: Path | None = None) -> BuildSpec:
        """Parse a spec, rejecting unknown keys; resolve relative paths against ``base``."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise EngineBuildError(f"unknown build spec key(s): {', '.join(sorted(unknown))}")
        values = dict(data)
        values["profiles"] = tuple(ShapeProfile.from_json(p) for p in data.get("profiles", ()))
        if base is not None:
            for key in ("onnx_path", "plan_path", "timing_cache_path"):
                if values.get(key) is not None:
                    values[key] = str(base / values[key])
        try:
            return cls(**values)
        except TypeError as exc:
            raise EngineBuildError(f"invalid build spec: {exc}") from exc


@dataclass(frozen=True)
class BuildReport:
    """What the build produced, for the manifest and the detector config."""

    plan_path: str
    plan_bytes: int
    tensors: tuple[TensorDesc, ...]
    tensorrt_version: str
    build_seconds: float
    timing_cache_path: str | None
    timing_cache_hit: bool
    # The machine the plan was built on: what decides where it loads (filled by the child process).
    gpu_name: str | None = None
    compute_capability: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_path": self.plan_path,
            "plan_bytes": self.plan_bytes,
            "tensors": [t.to_json() for t in self.tensors],
            "tensorrt_version": self.tensorrt_version,
            "build_seconds": self.build_seconds,
            "timing_cache_path": self.timing_cache_path,
            "timing_cache_hit": self.timing_cache_hit,
            "gpu_name": self.gpu_name,
            "compute_capability": self.compute_capability,
            "cuda_version": self.cuda_version,
            "driver_version": self.driver_version,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildReport:
        try:
            return cls(
                plan_path=str(data["plan_path"]),
                plan_bytes=int(data["plan_bytes"]),
                tensors=tuple(TensorDesc.from_json(t) for t in data["tensors"]),
                tensorrt_version=str(data["tensorrt_version"]),
                build_seconds=float(data["build_seconds"]),
                timing_cache_path=data.get("timing_cache_path"),
                timing_cache_hit=bool(data.get("timing_cache_hit", False)),
                gpu_name=data.get("gpu_name"),
                compute_capability=data.get("compute_capability"),
                cuda_version=data.get("cuda_version"),
                driver_version=data.get("driver_version"),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise EngineBuildError(f"the build report is malformed ({type(exc).__name__}: {exc})") from exc


def build_plan(spec: BuildSpec) -> BuildReport:
    """Parse the ONNX, build, serialize the plan to ``spec.plan_path`` and describe its I/O."""
    import tensorrt as trt

    started = time.perf_counter()
    logger = trt.Logger(trt.Logger.VERBOSE if spec.verbose else trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(spec.onnx_path):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise EngineBuildError(
            f"TensorRT could not parse {spec.onnx_path}: {' | '.join(errors) or 'no details'}"
        )

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, spec.workspace_bytes)
    config.builder_optimization_level = spec.optimization_level
    if spec.hardware_compatibility != "none":
        config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel,
                                                      spec.hardware_compatibility.upper())
    if spec.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    _add_profiles(builder, network, config, spec)
    cache_hit = _load_timing_cache(config, spec.timing_cache_path)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(
            "TensorRT failed to build the plan; rerun reproduce_build.sh with --verbose for the log"
        )
    plan = bytes(memoryview(serialized))
    _save_timing_cache(config, spec.timing_cache_path)
    _atomic_write(Path(spec.plan_path), plan)

    runtime = trt.Runtime(logger)
    if spec.version_compatible:
        # A version-compatible plan embeds the lean runtime's host code; the runtime refuses it unless
        # allowed (IRuntime::setEngineHostCodeAllowed, default false). Triton's TensorRT backend does the
        # same when started with --backend-config=tensorrt,version-compatible=true (loader.cc LoadPlan).
        runtime.engine_host_code_allowed = True
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise EngineBuildError("the freshly built plan does not deserialize on this machine")
    tensors = tuple(describe_engine(engine))
    return BuildReport(
        plan_path=spec.plan_path,
        plan_bytes=len(plan),
        tensors=tensors,
        tensorrt_version=trt.__version__,
        build_seconds=time.perf_counter() - started,
        timing_cache_path=spec.timing_cache_path,
        timing_cache_hit=cache_hit,
    )


def _add_profiles(
    builder: trt.Builder, network: trt.INetworkDefinition, config: trt.IBuilderConfig, spec: BuildSpec
) -> None:
    import tensorrt as trt

    inputs = {network.get_input(i).name for i in range(network.num_inputs)}
    # One optimization profile holding every input's shapes: TensorRT needs each dynamic input in each profile
    # (a two-stage build's classifier plan has two, the crops and their count).
    profile = builder.create_optimization_profile()
    for shapes in spec.profiles:
        if shapes.input_name not in inputs:
            raise EngineBuildError(
                f"profile names input {shapes.input_name!r} but the ONNX inputs are {', '.join(sorted(inputs))}"
            )
        profile.set_shape(
            shapes.input_name,
            trt.Dims(list(shapes.min)),
            trt.Dims(list(shapes.opt)),
            trt.Dims(list(shapes.max)),
        )
    if config.add_optimization_profile(profile) < 0:
        names = ", ".join(repr(shapes.input_name) for shapes in spec.profiles)
        raise EngineBuildError(f"TensorRT rejected the optimization profile for {names}")


def _load_timing_cache(config: trt.IBuilderConfig, path: str | None) -> bool:
    """Attach the timing cache (reused tactic timings make rebuilds minutes faster)."""
    previous = b""
    if path is not None and Path(path).is_file():
        previous = Path(path).read_bytes()
    cache = config.create_timing_cache(previous)
    if not config.set_timing_cache(cache, False):
        # A cache from another TensorRT version or GPU is rejected; start a fresh one.
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, False)
        return False
    return bool(previous)


def _save_timing_cache(config: trt.IBuilderConfig, path: str | None) -> None:
    if path is None:
        return
    _atomic_write(Path(path), bytes(memoryview(config.get_timing_cache().serialize())))


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def read_spec(path: Path) -> BuildSpec:
    """Load ``build_spec.json``; relative paths in it are relative to its directory."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EngineBuildError(f"cannot read build spec {path}: {exc}") from exc
    return BuildSpec.from_json(data, base=path.parent)
