"""Everything about a TensorRT plan that is known before TensorRT runs, derived from the served ONNX.

The served detector takes either letterboxed uint8 BGR NHWC images (``--normalise-in graph``: the
normalisation prefix is part of the graph) or float RGB NCHW tensors in the graph's own input type
(``--normalise-in preprocess``). The optimization profile, the bindings the plan will expose (and so the
detector config), and the warmup sample all follow from that input and the head behind it, so a
``--defer-plan`` build writes them on a machine without TensorRT and the plan built later must match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import onnx

from generator.builder.stages.config.detector_io import (
    WARMUP_FILE,
    ConfigTensor,
    DetectorIO,
    Warmup,
    image_layout,
    warmup_image,
)
from generator.builder.stages.tensorrt.bindings import DetectorBindings, TensorDesc, derive_detector_bindings
from generator.builder.stages.tensorrt.builder import BuildSpec
from generator.builder.stages.tensorrt.errors import ProfileError
from generator.builder.stages.tensorrt.profiles import ShapeProfile, detector_profile

if TYPE_CHECKING:
    from generator.builder.spec.options import BuildOptions
    from generator.model.onnx_inspect import DetectorInfo

ONNX_NAME = "model.onnx"
PLAN_NAME = "model.plan"
# ONNX element types -> TensorRT DataType names, as the ONNX parser maps network I/O.
ONNX_TO_TRT: dict[int, str] = {
    onnx.TensorProto.FLOAT: "FLOAT", onnx.TensorProto.FLOAT16: "HALF", onnx.TensorProto.BFLOAT16: "BF16",
    onnx.TensorProto.UINT8: "UINT8", onnx.TensorProto.INT8: "INT8", onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64", onnx.TensorProto.BOOL: "BOOL",
}


@dataclass(frozen=True)
class PlanRequest:
    """The build spec (paths relative to the detector's version folder) and what the plan must expose."""

    spec: BuildSpec
    profile: ShapeProfile
    engine: tuple[TensorDesc, ...]  # the I/O tensors TensorRT will report for this ONNX and profile
    bindings: DetectorBindings
    detector: DetectorIO  # the config's I/O, batch size and warmup sample


def _onnx_dims(value: onnx.ValueInfoProto) -> tuple[int | str, ...]:
    dims: list[int | str] = []
    for dim in value.type.tensor_type.shape.dim:
        dims.append(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else (dim.dim_param or "?"))
    return tuple(dims)


def _trt_dtype(value: onnx.ValueInfoProto) -> str:
    elem_type = value.type.tensor_type.elem_type
    if elem_type not in ONNX_TO_TRT:
        raise ProfileError(f"ONNX tensor '{value.name}' has element type "
                           f"{onnx.TensorProto.DataType.Name(elem_type)}, which a TensorRT engine cannot expose")
    return ONNX_TO_TRT[elem_type]


def _graph_io(served: onnx.ModelProto) -> tuple[onnx.ValueInfoProto, onnx.ValueInfoProto]:
    initializers = {i.name for i in served.graph.initializer}
    inputs = [v for v in served.graph.input if v.name not in initializers]
    if len(inputs) != 1 or len(served.graph.output) != 1:
        raise ProfileError(f"the served graph has {len(inputs)} inputs and {len(served.graph.output)} outputs; "
                           "a detector plan has one of each")
    return inputs[0], served.graph.output[0]


def expected_engine(served: onnx.ModelProto, profile: ShapeProfile,
                    head: tuple[int | str, ...] | None = None) -> tuple[TensorDesc, ...]:
    """The engine's I/O as TensorRT reports it: ONNX dims, -1 where dynamic; the input with its profile.

    ``head`` gives resolved output dims where the exporter left them symbolic (TensorRT computes them
    from the fixed input size); the output's batch is dynamic wherever the input's is.
    """
    graph_input, graph_output = _graph_io(served)
    input_shape = tuple(d if isinstance(d, int) else -1 for d in _onnx_dims(graph_input))
    head_shape = tuple(d if isinstance(d, int) else -1 for d in (head or _onnx_dims(graph_output)))
    output_shape = (input_shape[0] if input_shape[0] > 0 else -1, *head_shape[1:])
    return (
        TensorDesc(graph_input.name, _trt_dtype(graph_input), input_shape, True,
                   (profile.min, profile.opt, profile.max)),
        TensorDesc(graph_output.name, _trt_dtype(graph_output), output_shape, False),
    )


def plan_request(served: onnx.ModelProto, info: DetectorInfo, options: BuildOptions) -> PlanRequest:
    """Profile, expected bindings, config I/O and warmup for the served graph, before any TensorRT work."""
    trt = options.tensorrt
    graph_input, _ = _graph_io(served)
    height, width = info.image_size
    layout = image_layout(options)
    profile = detector_profile(graph_input.name, _onnx_dims(graph_input), info.static_batch or options.max_batch,
                               trt.opt_batch, height=height, width=width, layout=layout)
    engine = expected_engine(served, profile, info.output.shape)
    bindings = derive_detector_bindings(engine)
    (plan_input,), (plan_output,) = bindings.inputs, bindings.outputs
    item = tuple(profile.max[1:])  # one image, fully specified: the profile pins the spatial dims
    data = warmup_image(info.image_size, layout, plan_input.data_type)
    detector = DetectorIO(
        max_batch_size=bindings.max_batch_size,
        input=ConfigTensor(plan_input.name, plan_input.data_type, plan_input.dims),
        output=ConfigTensor(plan_output.name, plan_output.data_type, plan_output.dims),
        warmup=Warmup(WARMUP_FILE, item, data),
    )
    spec = BuildSpec(
        onnx_path=ONNX_NAME,
        plan_path=PLAN_NAME,
        profiles=(profile,),
        workspace_bytes=int(trt.workspace_gib * (1 << 30)),
        optimization_level=trt.optimization_level,
        hardware_compatibility=trt.hardware_compatibility,
        version_compatible=trt.version_compatible,
    )
    return PlanRequest(spec, profile, engine, bindings, detector)


def request_facts(request: PlanRequest, options: BuildOptions) -> dict[str, Any]:
    """The manifest's record of what was asked of the plan (the built facts join it later)."""
    trt = options.tensorrt
    return {
        "triton_image": trt.triton_image,
        "hardware_compatibility": trt.hardware_compatibility,
        "version_compatible": trt.version_compatible,
        "profile": request.profile.to_json(),
    }


def spec_problems(spec: BuildSpec, served: onnx.ModelProto) -> list[str]:
    """Why TensorRT would reject ``spec``'s profiles for this ONNX (checked before any GPU work).

    Every dynamic network input needs a profile of its rank (IOptimizationProfile::setDimensions), and a
    fixed ONNX dim admits only its own size.
    """
    initializers = {i.name for i in served.graph.initializer}
    inputs = {v.name: _onnx_dims(v) for v in served.graph.input if v.name not in initializers}
    problems = [f"the build spec's {key} {value!r} must be a file name next to the spec"
                for key, value in (("onnx_path", spec.onnx_path), ("plan_path", spec.plan_path))
                if "/" in value or "\\" in value or value in ("", ".", "..")]
    profiles = {p.input_name: p for p in spec.profiles}
    for name in sorted(set(profiles) - set(inputs)):
        problems.append(f"the build spec has a profile for '{name}' but the ONNX inputs are {sorted(inputs)}")
    for name, dims in sorted(inputs.items()):
        profile = profiles.get(name)
        if profile is None:
            if any(not isinstance(d, int) for d in dims):
                problems.append(f"the ONNX input '{name}' {list(dims)} has dynamic dims but no profile")
            continue
        if len(profile.min) != len(dims):
            problems.append(f"the profile for '{name}' has rank {len(profile.min)} but the ONNX input is {list(dims)}")
            continue
        for axis, dim in enumerate(dims):
            sizes = {profile.min[axis], profile.opt[axis], profile.max[axis]}
            if isinstance(dim, int) and sizes != {dim}:
                problems.append(f"the profile for '{name}' gives dim {axis} {sorted(sizes)} but the ONNX fixes it "
                                f"at {dim}")
    return problems
