"""What Triton 2.51 checks when it loads a model repository, run on every build before anything is written.

A config that parses is not a config that loads: the core, the ONNX Runtime backend and the TensorRT backend
each compare it with the model file and refuse mismatches only when the server starts (or, for warmup, after
the instances are up). Each rule below names the upstream function it reproduces (triton-inference-server,
branch r24.10 = Triton 2.51; ``core:src/model_config_utils.cc ValidateIOShape`` means repository
triton-inference-server/core, that file, that function). Rules marked "ours" are stricter than Triton where
Triton would load the model and then fail requests or ignore a setting without saying so.

Strict parsing comes first: every config is parsed with the ``model_config.proto`` of Triton 2.51 (the
embedded server's release, generator/builder/stages/config/schema.py), so a field Triton 2.51 does not know fails here as it
would in ``core:src/filesystem/api.cc ReadTextProto``; the rules below then read it with tritonclient's classes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.stages.config.model_io import ModelIO, ModelTensor
from generator.builder.stages.config.schema import model_config_class
from generator.errors import ConfigError
from generator.serving.cuda_provider import DEVICE_PARAMETER

Kind = mc.ModelInstanceGroup.Kind
# core:src/constants.h and the backends' LoadModel: the file a platform model loads by default.
DEFAULT_MODEL_FILES = {"onnxruntime_onnx": "model.onnx", "tensorrt_plan": "model.plan", "python": "model.py"}
# core:src/model_config_utils.cc GetBackendTypeFromPlatform: platforms tied to a backend.
PLATFORM_BACKENDS = {"onnxruntime_onnx": "onnxruntime", "tensorrt_plan": "tensorrt"}
# core:src/model_config_utils.cc GetDataTypeByteSize (TYPE_STRING has no fixed size).
DTYPE_BYTES = {"TYPE_BOOL": 1, "TYPE_UINT8": 1, "TYPE_INT8": 1, "TYPE_UINT16": 2, "TYPE_INT16": 2,
               "TYPE_FP16": 2, "TYPE_BF16": 2, "TYPE_UINT32": 4, "TYPE_INT32": 4, "TYPE_FP32": 4,
               "TYPE_UINT64": 8, "TYPE_INT64": 8, "TYPE_FP64": 8}
# tensorrt_backend:src/tensorrt_utils.cc ConvertTrtTypeToDataType: what an engine tensor can be.
TENSORRT_DTYPES = {"TYPE_FP32", "TYPE_FP16", "TYPE_BF16", "TYPE_INT8", "TYPE_UINT8", "TYPE_INT32", "TYPE_INT64",
                   "TYPE_BOOL"}
# onnxruntime_backend:src/onnxruntime.cc ModelState::LoadModel: TensorRT execution accelerator keys.
ORT_TENSORRT_KEYS = frozenset({
    "precision_mode", "max_workspace_size_bytes", "trt_max_partition_iterations", "trt_min_subgraph_size",
    "int8_calibration_table_name", "int8_use_native_calibration_table", "trt_dla_enable", "trt_dla_core",
    "trt_engine_cache_enable", "trt_engine_cache_path", "trt_engine_cache_prefix", "trt_dump_subgraphs",
    "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable", "trt_layer_norm_fp32_fallback",
    "trt_timing_cache_enable", "trt_timing_cache_path", "trt_force_timing_cache", "trt_detailed_build_log",
    "trt_build_heuristics_enable", "trt_sparsity_enable", "trt_builder_optimization_level",
    "trt_auxiliary_streams", "trt_tactic_sources", "trt_extra_plugin_lib_paths", "trt_profile_min_shapes",
    "trt_profile_max_shapes", "trt_profile_opt_shapes", "trt_cuda_graph_enable", "trt_dump_ep_context_model",
    "trt_ep_context_file_path", "trt_ep_context_embed_mode"})
ORT_TENSORRT_BOOLS = frozenset({"trt_engine_cache_enable", "trt_dump_subgraphs", "trt_dla_enable",
                                "int8_use_native_calibration_table", "trt_force_sequential_engine_build",
                                "trt_context_memory_sharing_enable", "trt_layer_norm_fp32_fallback",
                                "trt_timing_cache_enable", "trt_force_timing_cache", "trt_detailed_build_log",
                                "trt_build_heuristics_enable", "trt_sparsity_enable", "trt_cuda_graph_enable"})


@dataclass(frozen=True)
class Violation:
    """One reason Triton would refuse (or silently mis-serve) a model."""

    model: str
    message: str

    def __str__(self) -> str:
        return f"{self.model}: {self.message}"


def parse(name: str, text: str) -> mc.ModelConfig:
    """Parse ``text`` as Triton 2.51 does (``ReadTextProto``): unknown fields and bad enums raise ConfigError."""
    try:
        text_format.Parse(text, model_config_class()())  # Triton 2.51's schema: its unknown fields fail here
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"rendered config of '{name}' is not a valid Triton ModelConfig: {exc}") from exc


def _dtype(value: int) -> str:
    return str(mc.DataType.Name(value))


def _wildcard_equal(a: list[int], b: list[int]) -> bool:
    """core:src/model_config_utils.cc CompareDimsWithWildcard: equal rank, -1 matches anything."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _full_dims(config: mc.ModelConfig, dims: list[int]) -> list[int]:
    return [-1, *dims] if config.max_batch_size > 0 else list(dims)


# --- core: every model ------------------------------------------------------------------------------


def _identity_rules(config: mc.ModelConfig, directory: str) -> Iterator[str]:
    # core:src/model_repository_manager/model_repository_manager.cc: "directory name must equal model name".
    if config.name != directory:
        yield f"config name '{config.name}' differs from its directory '{directory}'; they must be equal"
    # core:src/model_config_utils.cc ValidateModelConfig: platform/backend pairs, max_batch_size >= 0.
    if config.platform == "ensemble" and config.backend:
        yield "an ensemble must have platform 'ensemble' and no backend"
    if not config.platform and not config.backend:
        yield "neither platform nor backend is set"
    expected = PLATFORM_BACKENDS.get(config.platform)
    if expected is not None and config.backend not in ("", expected):
        yield f"unexpected 'platform' and 'backend' pair: '{config.platform}' with '{config.backend}'"
    if config.max_batch_size < 0:
        yield f"max_batch_size {config.max_batch_size} is negative"


def _batching_rules(config: mc.ModelConfig) -> Iterator[str]:
    """core:src/model_config_utils.cc ValidateModelConfig, dynamic_batching part."""
    if not config.HasField("dynamic_batching"):
        return
    batching = config.dynamic_batching
    for size in batching.preferred_batch_size:
        if not 0 < size <= config.max_batch_size:
            yield f"preferred_batch_size {size} must be in 1..max_batch_size ({config.max_batch_size})"
    levels = batching.priority_levels
    if levels and not 1 <= batching.default_priority_level <= levels:
        yield f"default_priority_level must be in [1, {levels}]"
    if batching.preserve_ordering and levels > 1:
        yield "preserve_ordering allows at most one priority level"
    policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
    if any(p.timeout_action == mc.ModelQueuePolicy.DELAY and p.default_timeout_microseconds for p in policies):
        yield "a queue policy may not combine timeout_action DELAY with a default timeout"


def _io_rules(config: mc.ModelConfig) -> Iterator[str]:
    """core:src/model_config_utils.cc ValidateIOShape / ValidateModelInput / ValidateModelOutput."""
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            if not tensor.name:
                yield f"an {kind} has no name"
            if tensor.data_type == mc.TYPE_INVALID:
                yield f"{kind} '{tensor.name}' has no data_type"
            if not tensor.dims:
                yield f"{kind} '{tensor.name}' must specify 'dims'"
            if any(d < 1 and d != -1 for d in tensor.dims):
                yield f"{kind} '{tensor.name}' dims {list(tensor.dims)}: each must be >= 1 or -1"
            if tensor.is_shape_tensor and config.platform != "tensorrt_plan":
                yield f"{kind} '{tensor.name}': shape tensors are only supported for TensorRT platform"
    if config.max_batch_size != 0 and any(t.optional for t in config.input):
        # onnxruntime_backend: optional inputs are refused with batching; ours for every backend.
        yield "optional inputs are not supported when max_batch_size != 0"


def _instance_rules(config: mc.ModelConfig) -> Iterator[str]:
    """core:src/model_config_utils.cc ValidateInstanceGroup (ensembles skip it)."""
    for group in config.instance_group:
        if group.kind in (Kind.KIND_CPU, Kind.KIND_MODEL) and group.gpus:
            yield f"instance group '{group.name}' of {Kind.Name(group.kind)} must not list gpus"
        if group.profile and config.platform != "tensorrt_plan":
            yield "instance group 'profile' is only allowed for platform tensorrt_plan"
        if any(not p.isdigit() for p in group.profile):
            yield f"instance group profiles {list(group.profile)} must be non-negative integers"


def served_versions(config: mc.ModelConfig) -> tuple[int, ...]:
    """The version folders a build serves: those a ``specific`` policy names, else 1 (the only one it writes)."""
    if config.version_policy.WhichOneof("policy_choice") == "specific":
        return tuple(config.version_policy.specific.versions)
    return (1,)


def _model_file_rules(config: mc.ModelConfig, files: Mapping[str, int], pending: set[str]) -> Iterator[str]:
    """The file each backend opens in each served version (core:src/constants.h defaults, the backends' LoadModel)."""
    for version in served_versions(config):
        if config.platform == "ensemble":
            if not any(PurePosixPath(p).parts[:2] == (config.name, str(version)) for p in files):
                yield f"the ensemble needs a version folder '{version}'"
            continue
        kind = config.platform or config.backend
        name = config.default_model_filename or DEFAULT_MODEL_FILES.get(kind, "")
        path = f"{config.name}/{version}/{name}"
        if name and path not in files and path not in pending:
            yield f"version {version} has no {name}"


def _warmup_rules(config: mc.ModelConfig, files: Mapping[str, int]) -> Iterator[str]:
    """core:src/backend_model_instance.cc GenerateWarmupData and InferenceRequest::Normalize for each sample."""
    if config.model_warmup and config.platform == "ensemble":
        yield "model_warmup is not allowed in an ensemble"  # ValidateEnsembleSchedulingConfig
        return
    inputs = {t.name: t for t in config.input}
    for sample in config.model_warmup:
        missing = sorted(n for n, t in inputs.items() if not t.optional and n not in sample.inputs)
        if sample.batch_size and missing:
            yield f"warmup '{sample.name}' lacks required input(s) {', '.join(missing)}"
        for key, value in sample.inputs.items():
            yield from _warmup_input_rules(config, sample.name, key, value, inputs.get(key), files)


def _warmup_input_rules(config: mc.ModelConfig, sample: str, key: str, value: mc.ModelWarmup.Input,
                        declared: mc.ModelInput | None, files: Mapping[str, int]) -> Iterator[str]:
    where = f"warmup '{sample}' input '{key}'"
    if declared is None:
        return  # a name that is no input becomes a control ("override") input
    if value.data_type != declared.data_type:
        yield f"{where} is {_dtype(value.data_type)} but the input is {_dtype(declared.data_type)}"
    dims = list(value.dims)
    if any(d < 0 for d in dims):
        yield f"{where} dims {dims}: warmup expects all variable-size dimensions specified"
        return
    if not _wildcard_equal(dims, list(declared.dims)):
        yield f"{where} dims {dims} do not fit the input's dims {list(declared.dims)} (batch excluded)"
    if value.WhichOneof("input_data_type") == "input_data_file":
        path = f"{config.name}/warmup/{value.input_data_file}"
        size = DTYPE_BYTES.get(_dtype(value.data_type))
        needed = math.prod(dims) * size if size else 0
        if path not in files:
            yield f"{where} reads {path}, which does not exist"
        elif files[path] < needed:
            yield (f"{where}: warmup setting expects {needed} bytes, but the data provided from "
                   f"{value.input_data_file} only has {files[path]} bytes")


# --- ONNX Runtime backend ----------------------------------------------------------------------------


def _onnxruntime_dims(config: mc.ModelConfig, kind: str, tensor: mc.ModelInput | mc.ModelOutput,
                      model: ModelTensor) -> Iterator[str]:
    """onnxruntime_backend:src/onnxruntime_utils.cc CompareDimsSupported (inputs inexact, outputs exact)."""
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    shape = list(model.shape)
    if config.max_batch_size > 0 and (not shape or shape[0] != -1):
        yield (f"{kind} '{tensor.name}': for the model to support batching the shape should have at least 1 "
               f"dimension and the first dimension must be -1, but the ONNX has {shape}; re-export with a dynamic "
               "batch (yolo export ... dynamic=True) or serve it with max_batch_size 0")
        return
    full = _full_dims(config, dims)
    exact = kind == "output"
    if len(full) != len(shape) or not all(
            m == c for m, c in zip(shape, full, strict=True) if exact or m != -1):
        yield f"{kind} '{tensor.name}' dims {full} do not match the ONNX shape {shape}"


def _onnxruntime_rules(config: mc.ModelConfig, io: ModelIO) -> Iterator[str]:
    """onnxruntime_backend:src/onnxruntime.cc ValidateInputs / ValidateOutputs / LoadModel."""
    names = {t.name for t in config.input}
    for model_input in io.inputs:
        if model_input.name not in names:
            yield f"the ONNX input '{model_input.name}' is not in the config (configuration expects " \
                  f"{len(names)} inputs, model provides {len(io.inputs)})"
    for kind, tensors, lookup in (("input", config.input, io.input), ("output", config.output, io.output)):
        for tensor in tensors:
            model = lookup(tensor.name)
            if model is None:
                yield f"unexpected inference {kind} '{tensor.name}': the ONNX has no such {kind}"
                continue
            if model.data_type == "TYPE_BF16" or _dtype(tensor.data_type) != model.data_type:
                yield (f"configuration expects datatype {_dtype(tensor.data_type)} for {kind} '{tensor.name}', "
                       f"model provides {model.data_type}" + (" (BF16 is unsupported in 24.10)"
                                                             if model.data_type == "TYPE_BF16" else ""))
            yield from _onnxruntime_dims(config, kind, tensor, model)
    yield from _onnxruntime_instance_rules(config)


def _onnxruntime_instance_rules(config: mc.ModelConfig) -> Iterator[str]:
    """onnxruntime_backend:src/onnxruntime.cc ModelState::LoadModel: devices and execution accelerators."""
    kinds = {g.kind for g in config.instance_group}
    if Kind.KIND_MODEL in kinds:  # ours: the backend runs it on the CPU without saying so
        yield "KIND_MODEL instances run on the CPU without a GPU provider; use KIND_CPU or KIND_GPU"
    accelerators = config.optimization.execution_accelerators
    if accelerators.gpu_execution_accelerator and kinds and kinds <= {Kind.KIND_CPU}:
        # ours: LoadModel configures GPU providers only for GPU instances and ignores them silently otherwise.
        yield "gpu_execution_accelerator is ignored on KIND_CPU instances; use KIND_GPU"
    for accelerator in accelerators.gpu_execution_accelerator:
        if accelerator.name not in ("tensorrt", "cuda"):
            yield f"unknown Execution Accelerator '{accelerator.name}' is requested"
        if accelerator.name == "tensorrt":
            yield from _ort_tensorrt_parameters(dict(accelerator.parameters))
    for accelerator in accelerators.cpu_execution_accelerator:
        if accelerator.name != "openvino":
            yield f"unknown Execution Accelerator '{accelerator.name}' is requested"


def _ort_tensorrt_parameters(parameters: dict[str, str]) -> Iterator[str]:
    for key, value in sorted(parameters.items()):
        if key not in ORT_TENSORRT_KEYS:
            yield f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
        elif key == "precision_mode" and value not in ("FP32", "FP16", "INT8"):
            yield f"unsupported precision mode '{value}' is requested"
        elif key in ORT_TENSORRT_BOOLS and value.lower() not in ("1", "0", "true", "false", "on", "off"):
            yield f"TensorRT Execution Accelerator parameter '{key}' must be a boolean, got '{value}'"
        elif key in ("max_workspace_size_bytes", "trt_min_subgraph_size") and not value.isdigit():
            yield f"TensorRT Execution Accelerator parameter '{key}' must be an integer, got '{value}'"


# --- TensorRT backend ------------------------------------------------------------------------------------


def _tensorrt_max_batch(io: ModelIO) -> int | None:
    """tensorrt_backend:src/model_state.cc GetMaxSupportedBatchSize: min over inputs of the profile max batch."""
    batches = []
    for tensor in io.inputs:
        if tensor.shape and tensor.shape[0] > 0:
            batches.append(tensor.shape[0])
        elif tensor.profile is not None:
            batches.append(tensor.profile[2][0])
    return min(batches) if batches else None


def _tensorrt_rules(config: mc.ModelConfig, io: ModelIO) -> Iterator[str]:
    """tensorrt_backend:src/instance_state.cc (kinds, bindings) and tensorrt_utils.cc CompareDimsSupported."""
    if any(g.kind not in (Kind.KIND_GPU, Kind.KIND_AUTO) for g in config.instance_group):
        yield "TensorRT backend supports only GPU device: use KIND_GPU instances"
    engine_max = _tensorrt_max_batch(io)
    if config.max_batch_size > 0 and engine_max is not None and config.max_batch_size > engine_max:
        yield (f"configuration specified max-batch {config.max_batch_size} but TensorRT engine only supports "
               f"max-batch {engine_max}")
    for kind, tensors, lookup in (("input", config.input, io.input), ("output", config.output, io.output)):
        for tensor in tensors:
            model = lookup(tensor.name)
            if model is None:
                yield f"unexpected inference {kind} '{tensor.name}': the engine has no such {kind}"
                continue
            yield from _tensorrt_tensor_rules(config, kind, tensor, model)


def _tensorrt_tensor_rules(config: mc.ModelConfig, kind: str, tensor: mc.ModelInput | mc.ModelOutput,
                           model: ModelTensor) -> Iterator[str]:
    dtype = _dtype(tensor.data_type)
    if dtype not in TENSORRT_DTYPES:
        yield f"{kind} '{tensor.name}' is {dtype}: unsupported datatype for TensorRT"
    elif dtype != model.data_type:
        yield f"unexpected datatype {dtype} for inference {kind} '{tensor.name}', expecting {model.data_type}"
    full = _full_dims(config, list(tensor.dims))
    shape = list(model.shape)
    # CompareDimsSupported: the batch dim is compared with -1 and so skipped; -1 on either side matches.
    if not _wildcard_equal(full, shape):
        yield f"{kind} '{tensor.name}' dims {full} do not match the engine shape {shape}"
    elif model.profile is not None:
        low, _, high = model.profile
        # TRTv3Interface ValidateDimension: a fixed config dim must lie inside the profile.
        for axis, dim in enumerate(full):
            if dim != -1 and not low[axis] <= dim <= high[axis]:
                yield f"{kind} '{tensor.name}' dim {axis} = {dim} is outside the engine profile {low}..{high}"
        if config.max_batch_size > 0 and low[0] != 1:  # ours: the dynamic batcher also sends batches of 1
            yield f"{kind} '{tensor.name}': the engine profile starts at batch {low[0]}, not 1"


# --- ensembles ---------------------------------------------------------------------------------------------


def _ensemble_fields(ensemble: mc.ModelConfig) -> Iterator[str]:
    """core:src/model_config_utils.cc ValidateEnsembleSchedulingConfig."""
    if ensemble.instance_group or ensemble.HasField("optimization") or ensemble.model_warmup:
        yield "an ensemble may not have instance_group, optimization or model_warmup"
    if ensemble.HasField("dynamic_batching"):  # ours: it would reset every request's priority (core model.cc Init)
        yield "an ensemble must not set dynamic_batching (its composing models batch)"
    for step in ensemble.ensemble_scheduling.step:
        if not step.model_name or not step.input_map or not step.output_map:
            yield "every ensemble step needs model_name, input_map and output_map"
    if not ensemble.ensemble_scheduling.step:
        yield "the ensemble has no steps"


def _ensemble_batching(ensemble: mc.ModelConfig, model: mc.ModelConfig) -> Iterator[str]:
    # core:src/ensemble_scheduler/ensemble_utils.cc ValidateEnsembleConfig.
    if model.max_batch_size != 0 and model.max_batch_size < ensemble.max_batch_size:
        yield (f"ensemble max_batch_size {ensemble.max_batch_size} exceeds '{model.name}' max_batch_size "
               f"{model.max_batch_size}")
    # ours (InferenceRequest::Normalize): a non-batching step with a fixed leading batch takes only that many.
    fixed = sorted({t.dims[0] for t in model.input if t.dims and t.dims[0] > 0})
    if ensemble.max_batch_size > 0 and model.max_batch_size == 0 and fixed and (
            fixed != [1] or ensemble.max_batch_size > 1):
        yield (f"'{model.name}' does not batch and takes a leading batch of {fixed[0]}; the ensemble must have "
               "max_batch_size 1")


@dataclass
class _Tensor:
    data_type: int
    dims: list[int]
    full: list[int]
    producer: str


def _ensemble_tensors(ensemble: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]
                      ) -> tuple[dict[str, _Tensor], Iterator[str]]:
    """Producers of every ensemble tensor; two writers of one tensor are an error (BuildEnsembleGraph)."""
    tensors = {t.name: _Tensor(t.data_type, list(t.dims), _full_dims(ensemble, list(t.dims)), "ensemble input")
               for t in ensemble.input}
    problems: list[str] = []
    for step in ensemble.ensemble_scheduling.step:
        model = composing.get(step.model_name)
        if model is None:
            continue
        outputs = {t.name: t for t in model.output}
        for key, name in step.output_map.items():
            if key not in outputs:
                problems.append(f"step '{model.name}' maps output '{key}', which the model does not have")
                continue
            if name in tensors:
                problems.append(f"ensemble tensor '{name}' is written more than once")
            out = outputs[key]
            tensors[name] = _Tensor(out.data_type, list(out.dims), _full_dims(model, list(out.dims)),
                                    f"'{model.name}' output '{key}'")
    return tensors, iter(problems)


def _consistent(producer: _Tensor, data_type: int, dims: list[int], full: list[int]) -> bool:
    """ensemble_utils.cc ValidateTensorConsistency: same dtype; dims, or else full dims, agree."""
    return producer.data_type == data_type and (
        _wildcard_equal(producer.dims, dims) or _wildcard_equal(producer.full, full))


def ensemble_violations(ensemble: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]) -> list[Violation]:
    """Every ensemble rule: fields, batch sizes, tensor mapping, consistency and graph shape."""
    problems = list(_ensemble_fields(ensemble))
    tensors, mapping_problems = _ensemble_tensors(ensemble, composing)
    problems += list(mapping_problems)
    consumed: set[str] = set()
    for step in ensemble.ensemble_scheduling.step:
        model = composing.get(step.model_name)
        if model is None:
            problems.append(f"ensemble '{ensemble.name}' uses unknown model '{step.model_name}'")
            continue
        problems += list(_ensemble_batching(ensemble, model))
        if step.model_version != -1 and step.model_version not in served_versions(model):
            # model_repository_manager: "ensemble ... depends on ... whose required version ... is not loaded"
            problems.append(f"ensemble '{ensemble.name}' pins '{step.model_name}' version {step.model_version}, "
                            f"which that model does not serve (versions {list(served_versions(model))})")
        problems += list(_step_inputs(model, dict(step.input_map), tensors))
        consumed |= set(step.input_map.values())
    for out in ensemble.output:
        consumed.add(out.name)
        producer = tensors.get(out.name)
        if producer is None or producer.producer == "ensemble input":
            problems.append(f"ensemble output '{out.name}' is not produced by any step")
        elif not _consistent(producer, out.data_type, list(out.dims), _full_dims(ensemble, list(out.dims))):
            problems.append(f"ensemble output '{out.name}' is declared {_dtype(out.data_type)} {list(out.dims)} "
                            f"but {producer.producer} is {_dtype(producer.data_type)} {producer.dims}")
    for name, tensor in tensors.items():
        if name not in consumed:
            what = "ensemble input" if tensor.producer == "ensemble input" else "ensemble tensor"
            problems.append(f"{what} '{name}' is unused in ensemble")
    return [Violation(ensemble.name, p) for p in problems]


def _step_inputs(model: mc.ModelConfig, input_map: dict[str, str], tensors: Mapping[str, _Tensor]
                 ) -> Iterator[str]:
    """ensemble_utils.cc ValidateTensorMapping and ValidateTensorConsistency for one step's inputs."""
    inputs = {t.name: t for t in model.input}
    unknown = sorted(set(input_map) - set(inputs))
    unmapped = sorted(n for n, t in inputs.items() if n not in input_map and not t.optional)
    if unknown or unmapped:
        yield f"step '{model.name}' maps inputs {sorted(input_map)} but the model has {sorted(inputs)}"
    for key, name in sorted(input_map.items()):
        if key not in inputs:
            continue
        producer = tensors.get(name)
        wanted = inputs[key]
        if producer is None:
            yield f"step '{model.name}' input '{key}' reads '{name}', which nothing produces"
        elif not _consistent(producer, wanted.data_type, list(wanted.dims), _full_dims(model, list(wanted.dims))):
            yield (f"'{name}' from {producer.producer} is {_dtype(producer.data_type)} {producer.dims} but "
                   f"'{model.name}' input '{key}' expects {_dtype(wanted.data_type)} {list(wanted.dims)}")


# --- the repository ----------------------------------------------------------------------------------------


def model_violations(config: mc.ModelConfig, directory: str, files: Mapping[str, int], io: ModelIO | None,
                     pending: set[str]) -> list[Violation]:
    """Every rule for one composing model; ``io`` is its file's I/O (platform models), ``files`` sizes."""
    problems = [*_identity_rules(config, directory), *_batching_rules(config), *_io_rules(config),
                *_model_file_rules(config, files, pending), *_warmup_rules(config, files)]
    if config.platform != "ensemble":
        problems += list(_instance_rules(config))
    if config.platform == "onnxruntime_onnx" and io is not None:
        problems += list(_onnxruntime_rules(config, io))
    if config.platform == "tensorrt_plan" and io is not None:
        problems += list(_tensorrt_rules(config, io))
    on_gpu = "gpu" in (config.parameters["preprocess_device"].string_value,  # --preprocess-device gpu
                       config.parameters[DEVICE_PARAMETER].string_value)  # --target embedded --device gpu
    if config.backend == "python" and any(g.kind == Kind.KIND_GPU for g in config.instance_group) and not on_gpu:
        # ours: KIND_GPU Python instances need a GPU server; only the GPU preprocess and GPU detector use one.
        problems.append("Python-backend steps run on the CPU: use KIND_CPU")
    return [Violation(config.name or directory, p) for p in problems]


def repository_violations(files: Mapping[str, bytes | int], model_io: Mapping[str, ModelIO],
                          pending: set[str] | None = None) -> list[Violation]:
    """Parse every ``<model>/config.pbtxt`` in ``files`` (path -> content or size) and apply every rule.

    ``model_io`` holds the I/O of platform models by name; ``pending`` lists model files that are still to
    come (``--defer-plan``) and are not reported missing.
    """
    sizes = {p: (v if isinstance(v, int) else len(v)) for p, v in files.items()}
    configs: dict[str, mc.ModelConfig] = {}
    for path, content in sorted(files.items()):
        parts = PurePosixPath(path).parts
        if len(parts) == 2 and parts[1] == "config.pbtxt" and isinstance(content, bytes):
            configs[parts[0]] = parse(parts[0], content.decode())
    violations: list[Violation] = []
    for directory, config in configs.items():
        violations += model_violations(config, directory, sizes, model_io.get(config.name), pending or set())
    for config in configs.values():
        if config.platform == "ensemble":
            violations += ensemble_violations(config, {c.name: c for c in configs.values()})
    return violations


def check_load_rules(files: Mapping[str, bytes | int], model_io: Mapping[str, ModelIO],
                     pending: set[str] | None = None) -> None:
    """Raise ConfigError naming every rule the repository breaks (nothing is written before this passes)."""
    violations = repository_violations(files, model_io, pending)
    if violations:
        raise ConfigError("Triton 2.51 would refuse this repository: " + "; ".join(map(str, violations)))


def check_ensemble_wiring(ensemble: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]) -> None:
    """Raise ConfigError for the first broken ensemble rule (names, dtypes, dims, batch sizes)."""
    violations = ensemble_violations(ensemble, composing)
    if violations:
        raise ConfigError(violations[0].message)
