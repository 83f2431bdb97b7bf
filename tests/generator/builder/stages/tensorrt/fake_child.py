"""A stand-in for the TensorRT build child (``python -m generator.builder.stages.tensorrt.child``) on machines
without TensorRT or a GPU: the only thing the tests replace on the TensorRT path.

It speaks the child's command line (``--probe``; ``--spec --report [--timing-cache-dir]``), reads the real
``build_spec.json`` with the project's reader, checks its profiles against the real served ONNX on its own
(as TensorRT's parser and IOptimizationProfile would: one profile over every input), and reports the engine I/O
TensorRT would: the ONNX inputs with -1 for dynamic dims and the spec's profile, and the output shapes ONNX Runtime
computes for the profile's opt shapes. The "plan" it writes is a marker, not an engine.

Environment knobs for failure tests: FAKE_TRT_VERSION (default 10.3.0.26), FAKE_CHILD_FAIL (exit 1 with a
TensorRT-like error), FAKE_CHILD_OUTPUT_DTYPE (report the output in another TensorRT type).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from generator.builder.stages.tensorrt.builder import read_spec

GPU = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
TRT_TYPES: dict[int, str] = {onnx.TensorProto.FLOAT: "FLOAT", onnx.TensorProto.FLOAT16: "HALF", onnx.TensorProto.UINT8: "UINT8",
             onnx.TensorProto.INT32: "INT32"}
NUMPY: dict[str, Any] = {"FLOAT": np.float32, "HALF": np.float16, "UINT8": np.uint8, "INT32": np.int32}
PLAN_MAGIC = b"FAKE-TENSORRT-PLAN\n"


def use_fake_child(monkeypatch) -> None:
    """Point the build at this stand-in, the way a site points it at a wrapper."""
    from generator.builder.stages.tensorrt.child import CHILD_ENV

    monkeypatch.setenv(CHILD_ENV, f"{sys.executable} {Path(__file__).resolve()}")


def facts() -> dict:
    return {"tensorrt_version": os.environ.get("FAKE_TRT_VERSION", "10.3.0.26"), "cuda_version": "12.6",
            "driver_version": "560.35.03", "gpus": [GPU]}


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def dims(value: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
            for d in value.type.tensor_type.shape.dim]


def profile_problem(inputs: dict[str, onnx.ValueInfoProto], profiles: dict[str, Any]) -> str | None:
    """Why TensorRT would refuse the one optimization profile for these inputs (None: it fits)."""
    if set(profiles) != set(inputs):
        return f"profile names input(s) {sorted(profiles)} but the ONNX inputs are {', '.join(sorted(inputs))}"
    for name, graph_input in inputs.items():
        shape, profile = dims(graph_input), profiles[name]
        if len(shape) != len(profile.min):
            return f"profile rank {len(profile.min)} does not match input rank {len(shape)}"
        for axis, dim in enumerate(shape):
            if dim != -1 and {profile.min[axis], profile.opt[axis], profile.max[axis]} != {dim}:
                return f"profile dim {axis} does not match the fixed ONNX dim {dim}"
    return None


def engine_tensors(model: onnx.ModelProto, inputs: dict[str, onnx.ValueInfoProto], profiles: dict[str, Any],
                   onnx_path: str) -> list[dict[str, Any]]:
    """Every I/O tensor as TensorRT reports it: inputs with their profile, outputs at the opt shapes' run."""
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    feeds = {name: np.zeros(profiles[name].opt, NUMPY[TRT_TYPES[v.type.tensor_type.elem_type]])
             for name, v in inputs.items()}
    outs = session.run(None, feeds)
    dynamic = any(dims(v)[0] == -1 for v in inputs.values())
    tensors = [{"name": name, "dtype": TRT_TYPES[v.type.tensor_type.elem_type], "shape": dims(v), "is_input": True,
                "profile": [list(profiles[name].min), list(profiles[name].opt), list(profiles[name].max)]}
               for name, v in inputs.items()]
    for graph_output, out in zip(model.graph.output, outs, strict=True):
        dtype = os.environ.get("FAKE_CHILD_OUTPUT_DTYPE") or TRT_TYPES[graph_output.type.tensor_type.elem_type]
        tensors.append({"name": graph_output.name, "dtype": dtype, "is_input": False,
                        "shape": [-1 if dynamic else out.shape[0], *out.shape[1:]]})
    return tensors


def build(spec_path: Path, report_path: Path) -> int:
    spec = read_spec(spec_path)
    model = onnx.load(spec.onnx_path)
    initializers = {i.name for i in model.graph.initializer}
    inputs = {v.name: v for v in model.graph.input if v.name not in initializers}
    profiles = {p.input_name: p for p in spec.profiles}  # one optimization profile over every input
    if problem := profile_problem(inputs, profiles):
        return fail(problem)
    if os.environ.get("FAKE_CHILD_FAIL"):
        return fail("TensorRT failed to build the plan (FAKE_CHILD_FAIL)")
    tensors = engine_tensors(model, inputs, profiles, spec.onnx_path)
    onnx_bytes = Path(spec.onnx_path).read_bytes()
    plan = PLAN_MAGIC + hashlib.sha256(onnx_bytes).hexdigest().encode()
    Path(spec.plan_path).write_bytes(plan)
    machine = facts()
    report = {
        "plan_path": spec.plan_path, "plan_bytes": len(plan), "tensors": tensors,
        "tensorrt_version": machine["tensorrt_version"], "build_seconds": 0.5,
        "timing_cache_path": spec.timing_cache_path, "timing_cache_hit": False,
        "gpu_name": GPU["name"], "compute_capability": GPU["compute_capability"],
        "cuda_version": machine["cuda_version"], "driver_version": machine["driver_version"],
    }
    report_path.write_text(json.dumps(report, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--timing-cache-dir", type=Path)
    parser.add_argument("--probe", action="store_true")
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(facts()))
        return 0
    return build(args.spec, args.report)


if __name__ == "__main__":
    sys.exit(main())
