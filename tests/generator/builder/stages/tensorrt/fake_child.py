"""A stand-in for the TensorRT build child (``python -m generator.builder.stages.tensorrt.child``) on machines
without TensorRT or a GPU: the only thing the tests replace on the TensorRT path.

It speaks the child's command line (``--probe``; ``--spec --report [--timing-cache-dir]``), reads the real
``build_spec.json`` with the project's reader, checks its profiles against the real served ONNX on its own
(as TensorRT's parser and IOptimizationProfile would), and reports the engine I/O TensorRT would: the ONNX
input with -1 for dynamic dims and the spec's profile, and the output shape ONNX Runtime computes for the
profile's opt shape. The "plan" it writes is a marker, not an engine.

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

import numpy as np
import onnx
import onnxruntime as ort

from generator.builder.stages.tensorrt.builder import read_spec

GPU = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
TRT_TYPES = {onnx.TensorProto.FLOAT: "FLOAT", onnx.TensorProto.FLOAT16: "HALF", onnx.TensorProto.UINT8: "UINT8"}
NUMPY = {"FLOAT": np.float32, "HALF": np.float16, "UINT8": np.uint8}
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


def build(spec_path: Path, report_path: Path) -> int:
    spec = read_spec(spec_path)
    model = onnx.load(spec.onnx_path)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    (profile,) = spec.profiles
    (graph_input,) = inputs
    if profile.input_name != graph_input.name:
        return fail(f"profile names input {profile.input_name!r} but the ONNX inputs are {graph_input.name}")
    shape = dims(graph_input)
    if len(shape) != len(profile.min):
        return fail(f"profile rank {len(profile.min)} does not match input rank {len(shape)}")
    for axis, dim in enumerate(shape):
        if dim != -1 and {profile.min[axis], profile.opt[axis], profile.max[axis]} != {dim}:
            return fail(f"profile dim {axis} does not match the fixed ONNX dim {dim}")
    if os.environ.get("FAKE_CHILD_FAIL"):
        return fail("TensorRT failed to build the plan (FAKE_CHILD_FAIL)")
    input_type = TRT_TYPES[graph_input.type.tensor_type.elem_type]
    (graph_output,) = model.graph.output
    session = ort.InferenceSession(spec.onnx_path, providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {graph_input.name: np.zeros(profile.opt, NUMPY[input_type])})
    output_shape = [-1 if shape[0] == -1 else out.shape[0], *out.shape[1:]]
    output_type = os.environ.get("FAKE_CHILD_OUTPUT_DTYPE") or TRT_TYPES[graph_output.type.tensor_type.elem_type]
    onnx_bytes = Path(spec.onnx_path).read_bytes()
    plan = PLAN_MAGIC + hashlib.sha256(onnx_bytes).hexdigest().encode()
    Path(spec.plan_path).write_bytes(plan)
    machine = facts()
    report = {
        "plan_path": spec.plan_path, "plan_bytes": len(plan),
        "tensors": [
            {"name": graph_input.name, "dtype": input_type, "shape": shape, "is_input": True,
             "profile": [list(profile.min), list(profile.opt), list(profile.max)]},
            {"name": graph_output.name, "dtype": output_type, "shape": output_shape, "is_input": False},
        ],
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
