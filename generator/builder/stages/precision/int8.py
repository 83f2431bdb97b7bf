"""Explicit INT8 (Q/DQ) in the form TensorRT parses, calibrated on images through the serving preprocess.

TensorRT 11 builds only strongly typed networks: INT8 comes from QuantizeLinear/DequantizeLinear in the
ONNX, and every layer left outside them runs in the type the ONNX gives it. So the graph is made the way
NVIDIA Model Optimizer (the reference tool for TensorRT Q/DQ) makes it:

- symmetric INT8 (zero points 0), weights per output channel, activations per tensor;
- Q/DQ on the inputs of the convolutions only (TensorRT's placement guidance: quantize the inputs of
  weighted layers, not their outputs), so each DQ -> Conv -> SiLU -> Q becomes one INT8 kernel;
- Conv biases stay float: ONNX Runtime's default ``QuantizeBias`` puts them behind an INT32
  DequantizeLinear, which TensorRT's parser refuses (issue 10; NVIDIA/TensorRT#4542);
- the head tail (final class/box convs, DFL, box decode, score sigmoid and after) is excluded and stays FP32;
- the remaining float layers become FP16 (Model Optimizer's ``high_precision_dtype``): in a strongly
  typed network they would otherwise run in FP32 and the INT8 plan could be slower than the FP16 one.

Two tools place the Q/DQ: ONNX Runtime's ``quantize_static`` configured as above (the default, no
extra dependency) or Model Optimizer itself (``tool="modelopt"``, the ``int8-modelopt`` extra; it also
quantizes residual Adds, pools and concats, and pulls in torch). Both write an FP32 Q/DQ graph; the
FP16 conversion is ours, because Model Optimizer's converts the head tail as well. The result runs on
ONNX Runtime CPU, so the accuracy gate measures here the graph TensorRT compiles there.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import onnx

from generator.builder.stages.precision.calibration import (
    CALIBRATION_METHODS,
    BatchReader,
    CalibrationMethodName,
    ProgressFn,
    cache_key,
    default_cache_dir,
    digest_batches,
    log_progress,
    split_to_model_batch,
    stride_for,
)
from generator.builder.stages.precision.errors import CalibrationError, PrecisionError
from generator.builder.stages.precision.fp16 import Fp32Fallback
from generator.builder.stages.precision.head import ensure_node_names, find_detection_head

Int8Tool = Literal["ort", "modelopt"]
FloatDtype = Literal["fp16", "fp32"]
INT8_TOOLS: tuple[Int8Tool, ...] = ("ort", "modelopt")
FLOAT_DTYPES: tuple[FloatDtype, ...] = ("fp16", "fp32")
# FP16 scales on QuantizeLinear/DequantizeLinear exist from opset 19 (Model Optimizer upgrades to it too).
QDQ_OPSET = 19
# The JSON range cache (calibration_cache_path) and FP16 QuantizeLinear that rounds instead of truncating
# on the CPU (microsoft/onnxruntime#22741, fixed in 1.32): without the fix the gate would measure
# activations rounded differently from what TensorRT computes.
MIN_ONNXRUNTIME = (1, 32)
OP_TYPES_TO_QUANTIZE = ("Conv",)
_ORT_METHOD_NAMES = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


@dataclass(frozen=True)
class Int8Options:
    """What to quantize, with which tool, and how to calibrate.

    ``exclude_head`` keeps the head tail in FP32; ``nodes_to_exclude`` adds names. ``float_dtype`` is the
    type of the layers left unquantized. ``percentile`` only applies to the percentile method.
    """

    method: CalibrationMethodName = "minmax"
    percentile: float = 99.999
    per_channel: bool = True
    exclude_head: bool = True
    nodes_to_exclude: tuple[str, ...] = ()
    stride: int = 8
    tool: Int8Tool = "ort"
    float_dtype: FloatDtype = "fp16"

    def __post_init__(self) -> None:
        if self.method not in CALIBRATION_METHODS:
            raise PrecisionError(
                f"unknown calibration method {self.method!r}; choose one of {', '.join(CALIBRATION_METHODS)}"
            )
        if self.tool not in INT8_TOOLS:
            raise PrecisionError(f"unknown INT8 tool {self.tool!r}; choose one of {', '.join(INT8_TOOLS)}")
        if self.float_dtype not in FLOAT_DTYPES:
            raise PrecisionError(f"unknown float type {self.float_dtype!r}; choose one of {', '.join(FLOAT_DTYPES)}")
        if self.tool == "modelopt" and self.method == "percentile":
            raise PrecisionError("Model Optimizer calibrates with minmax or entropy, not percentile; "
                                 "pick one of those or the ort tool")
        if not 0.0 < self.percentile <= 100.0:
            raise PrecisionError(f"percentile must be in (0, 100], got {self.percentile}")
        if self.stride < 1:
            raise PrecisionError(f"calibration stride must be >= 1, got {self.stride}")

    def calibration_options(self) -> dict[str, object]:
        """The options the activation ranges depend on (part of the cache key)."""
        options: dict[str, object] = {"method": self.method, "op_types": list(OP_TYPES_TO_QUANTIZE),
                                      "opset": QDQ_OPSET}
        if self.method == "percentile":
            options["percentile"] = self.percentile
        return options


@dataclass(frozen=True)
class Int8Result:
    """The Q/DQ model plus what the manifest records about how it was made.

    ``cache_path`` is None for Model Optimizer, which calibrates on every build (it can read a TensorRT
    calibration cache but not write one).
    """

    model: onnx.ModelProto
    method: CalibrationMethodName
    calibration_digest: str
    cache_key: str
    cache_path: Path | None
    cache_hit: bool
    num_batches: int | None
    calibration_seconds: float
    total_seconds: float
    excluded_nodes: tuple[str, ...] = field(default=())
    tool: Int8Tool = "ort"
    float_dtype: FloatDtype = "fp16"
    fp32_fallback: tuple[Fp32Fallback, ...] = ()


@dataclass(frozen=True)
class _Quantized:
    """What a tool returns: the FP32 Q/DQ graph and how calibration went."""

    model: onnx.ModelProto
    digest: str
    key: str
    cache_path: Path | None
    hit: bool
    num_batches: int | None
    seconds: float


def quantize_int8(
    model: onnx.ModelProto,
    batches: Iterable[np.ndarray],
    options: Int8Options | None = None,
    *,
    data_digest: str | None = None,
    cache_dir: Path | None = None,
    progress: ProgressFn | None = log_progress,
) -> Int8Result:
    """Quantize ``model`` to explicit Q/DQ INT8, calibrating on ``batches``.

    ``batches`` are float32 NCHW arrays that went through the production preprocess (letterbox,
    RGB, /255). ``data_digest`` identifies them without reading them: when given and the range
    cache holds an entry for it, ``batches`` is never iterated, so an expensive generator costs
    nothing on a rebuild. Without it, the batches are read and hashed.
    """
    options = options or Int8Options()
    started = time.perf_counter()
    say = progress or (lambda _message: None)
    require_onnxruntime()
    named = ensure_node_names(model)
    _check_single_float_input(named)
    prepared = _with_qdq_opset(named)
    excluded = _nodes_to_exclude(prepared, options)
    if options.tool == "modelopt":
        quantized = _quantize_with_modelopt(prepared, batches, options, excluded, data_digest, say)
    else:
        quantized = _quantize_with_ort(prepared, batches, options, excluded, data_digest, cache_dir, progress)
    final, fallback = _finish(model, quantized.model, options)
    total = time.perf_counter() - started
    say(f"calibration: {'cached' if quantized.hit else f'{quantized.seconds:.1f} s'}, "
        f"quantization total {total:.1f} s")
    return Int8Result(
        model=final, method=options.method, calibration_digest=quantized.digest, cache_key=quantized.key,
        cache_path=quantized.cache_path, cache_hit=quantized.hit, num_batches=quantized.num_batches,
        calibration_seconds=quantized.seconds, total_seconds=total, excluded_nodes=excluded,
        tool=options.tool, float_dtype=options.float_dtype, fp32_fallback=fallback,
    )


def require_onnxruntime() -> None:
    """Fail early, with the fix, on an ONNX Runtime too old to calibrate and measure these graphs."""
    import onnxruntime

    found = tuple(int(part) for part in onnxruntime.__version__.split(".")[:2])
    if found < MIN_ONNXRUNTIME:
        wanted = ".".join(map(str, MIN_ONNXRUNTIME))
        raise PrecisionError(
            f"INT8 builds need onnxruntime>={wanted} (found {onnxruntime.__version__}): its FP16 QuantizeLinear "
            f"rounds like TensorRT and it caches calibration ranges; pip install 'onnxruntime>={wanted}' "
            "(wheels exist for Python 3.11 and later)"
        )


def _quantize_with_ort(
    model: onnx.ModelProto,
    batches: Iterable[np.ndarray],
    options: Int8Options,
    excluded: Sequence[str],
    data_digest: str | None,
    cache_dir: Path | None,
    progress: ProgressFn | None,
) -> _Quantized:
    say = progress or (lambda _message: None)
    items: list[np.ndarray] | None = None
    if data_digest is None:
        items = split_to_model_batch(batches, _static_batch(model))
        data_digest = digest_batches(items)
    model_bytes = model.SerializeToString(deterministic=True)
    key = cache_key(model_bytes, data_digest, options.method, options.calibration_options())
    cache_path = (cache_dir if cache_dir is not None else default_cache_dir()) / f"{key}.json"
    hit = cache_path.is_file()
    reader: BatchReader | None = None
    if hit:
        say(f"calibration: reusing cached ranges {cache_path}")
    else:
        if items is None:
            items = split_to_model_batch(batches, _static_batch(model))
        say(f"calibration: {len(items)} batch(es), method {options.method}")
        reader = BatchReader(model.graph.input[0].name, items, progress)
    try:
        quantized = _ort_quantize_static(model, reader, options, excluded, cache_path)
    except (ValueError, KeyError) as exc:
        if hit:
            raise CalibrationError(
                f"calibration cache {cache_path} is unreadable ({exc}); delete it and rebuild"
            ) from exc
        raise PrecisionError(f"INT8 quantization failed: {exc}") from exc
    seconds = reader.seconds if reader is not None else 0.0
    return _Quantized(quantized, data_digest, key, cache_path, hit, len(items) if items is not None else None,
                      seconds)


def _quantize_with_modelopt(
    model: onnx.ModelProto,
    batches: Iterable[np.ndarray],
    options: Int8Options,
    excluded: Sequence[str],
    data_digest: str | None,
    say: ProgressFn,
) -> _Quantized:
    from generator.builder.stages.precision.model_optimizer import (
        quantize_with_model_optimizer,
        require_model_optimizer,
    )

    require_model_optimizer()
    items = split_to_model_batch(batches, _static_batch(model))
    digest = data_digest or digest_batches(items)
    say(f"calibration: {len(items)} batch(es), method {options.method}, NVIDIA Model Optimizer")
    started = time.perf_counter()
    quantized = quantize_with_model_optimizer(model, items, options.method, excluded)
    return _Quantized(quantized, digest, "", None, False, len(items), time.perf_counter() - started)


def _finish(source: onnx.ModelProto, quantized: onnx.ModelProto, options: Int8Options
            ) -> tuple[onnx.ModelProto, tuple[Fp32Fallback, ...]]:
    """FP16 for the unquantized layers (head tail kept FP32), the exporter's metadata, and the checks."""
    from generator.builder.stages.precision.tensorrt_compat import check_tensorrt_compatible

    fallback: tuple[Fp32Fallback, ...] = ()
    if options.float_dtype == "fp16":
        from generator.builder.stages.precision.fp16 import convert_fp16_report

        conversion = convert_fp16_report(quantized, keep_head_fp32=options.exclude_head)
        quantized, fallback = conversion.model, conversion.fallback
    _copy_metadata(source, quantized)
    try:
        onnx.checker.check_model(quantized, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise PrecisionError(f"INT8 quantization produced an invalid graph: {exc}") from exc
    check_tensorrt_compatible(quantized, "INT8 graph")
    return quantized, fallback


def _nodes_to_exclude(model: onnx.ModelProto, options: Int8Options) -> tuple[str, ...]:
    names = {node.name for node in model.graph.node}
    unknown = sorted(set(options.nodes_to_exclude) - names)
    if unknown:
        raise PrecisionError(
            f"cannot exclude unknown node(s) from INT8: {', '.join(unknown)}; check the names in the ONNX"
        )
    head = find_detection_head(model).tail if options.exclude_head else ()
    return tuple(dict.fromkeys([*head, *options.nodes_to_exclude]))


def _check_single_float_input(model: onnx.ModelProto) -> None:
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1 or inputs[0].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise PrecisionError("INT8 calibration needs a detector with exactly one float32 image input")


def _static_batch(model: onnx.ModelProto) -> int | None:
    dims = model.graph.input[0].type.tensor_type.shape.dim
    if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
        return int(dims[0].dim_value)
    return None


def _with_qdq_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model at opset >= 19, converted by ONNX's own version converter (names and metadata kept)."""
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset >= QDQ_OPSET:
        return model
    try:
        converted = onnx.version_converter.convert_version(model, QDQ_OPSET)
    except (RuntimeError, ValueError, onnx.checker.ValidationError) as exc:
        raise PrecisionError(
            f"cannot upgrade the model from opset {opset} to {QDQ_OPSET} for Q/DQ ({exc}); re-export it with "
            f"opset {QDQ_OPSET}"
        ) from exc
    return converted


def _ort_quantize_static(
    model: onnx.ModelProto,
    reader: BatchReader | None,
    options: Int8Options,
    excluded: Sequence[str],
    cache_path: Path,
) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    extra: dict[str, object] = {
        "ActivationSymmetric": True,
        "WeightSymmetric": True,
        "QuantizeBias": False,  # an INT32 bias behind DequantizeLinear does not parse in TensorRT
        # Inputs only: a Q on a Conv output would put the SiLU after it on INT8 data and split the fusion.
        "OpTypesToExcludeOutputQuantization": list(OP_TYPES_TO_QUANTIZE),
    }
    if options.method == "percentile":
        extra["CalibPercentile"] = options.percentile
    # Write the range cache under a temporary name first: a build that dies mid-way must not
    # leave a truncated JSON that every later build would trip over.
    pending = cache_path
    if reader is not None:
        extra["CalibStridedMinMax"] = stride_for(len(reader), options.stride)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        pending = cache_path.with_name(f".{cache_path.name}.{id(reader)}.tmp")
    # quantize_static keeps its own intermediates in a temporary directory; only the output is ours.
    with tempfile.TemporaryDirectory(prefix="tde-int8-") as tmp, _quiet_onnxruntime_logs():
        output = Path(tmp) / "int8.onnx"
        quantize_static(
            model,
            output,
            calibration_data_reader=reader,
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(OP_TYPES_TO_QUANTIZE),
            per_channel=options.per_channel,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=list(excluded),
            calibrate_method=getattr(CalibrationMethod, _ORT_METHOD_NAMES[options.method]),
            extra_options=extra,
            calibration_cache_path=pending,
        )
        quantized = onnx.load_model(output)
    if pending != cache_path:
        pending.replace(cache_path)
    return quantized


def _copy_metadata(source: onnx.ModelProto, target: onnx.ModelProto) -> None:
    """Keep the exporter's metadata (class names, imgsz) that inspection reads."""
    props = {p.key: p.value for p in target.metadata_props}
    props.update({p.key: p.value for p in source.metadata_props})
    props["triton_detection_ensemble.precision"] = "int8"
    onnx.helper.set_model_props(target, props)


@contextlib.contextmanager
def _quiet_onnxruntime_logs() -> Iterator[None]:
    """Keep onnxruntime's quantizer chatter off stdout, including its advice to pre-process.

    Its pre-processing is symbolic shape inference, which on failure saves a file into the current
    directory; ``quantize_static`` runs ONNX shape inference itself, which is all a CNN needs.
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        # Its module-level logging.warning() calls install a root handler when there is none, after
        # which every record of the build would be printed twice.
        root.handlers[:] = handlers
        root.setLevel(level)
