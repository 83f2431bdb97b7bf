"""Explicit INT8 (Q/DQ) quantization with TensorRT-compatible settings.

TensorRT only runs symmetric INT8 (zero point 0, weights in [-127, 127]) and, from TensorRT 11,
only explicit Q/DQ networks. onnxruntime's static quantizer produces exactly that with
``ActivationSymmetric``/``WeightSymmetric`` and per-channel weights; the same graph runs on
onnxruntime CPU, which is how the accuracy gate measures it without a GPU.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from generator.builder.precision.calibration import (
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
from generator.builder.precision.errors import CalibrationError, PrecisionError
from generator.builder.precision.head import ensure_node_names, find_detection_head

_ORT_METHOD_NAMES = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


@dataclass(frozen=True)
class Int8Options:
    """What to quantize and how to calibrate.

    ``exclude_head`` keeps the head tail (final class/box convs, Sigmoid, Concat, DFL decode) in
    float; ``nodes_to_exclude`` adds names. ``percentile`` only applies to the percentile method.
    """

    method: CalibrationMethodName = "minmax"
    percentile: float = 99.999
    per_channel: bool = True
    exclude_head: bool = True
    nodes_to_exclude: tuple[str, ...] = ()
    pre_process: bool = True
    stride: int = 8

    def __post_init__(self) -> None:
        if self.method not in CALIBRATION_METHODS:
            raise PrecisionError(
                f"unknown calibration method {self.method!r}; choose one of {', '.join(CALIBRATION_METHODS)}"
            )
        if not 0.0 < self.percentile <= 100.0:
            raise PrecisionError(f"percentile must be in (0, 100], got {self.percentile}")
        if self.stride < 1:
            raise PrecisionError(f"calibration stride must be >= 1, got {self.stride}")

    def calibration_options(self) -> dict[str, object]:
        """The options the activation ranges depend on (part of the cache key)."""
        options: dict[str, object] = {"method": self.method, "pre_process": self.pre_process}
        if self.method == "percentile":
            options["percentile"] = self.percentile
        return options


@dataclass(frozen=True)
class Int8Result:
    """The Q/DQ model plus what the manifest records about how it was made."""

    model: onnx.ModelProto
    method: CalibrationMethodName
    calibration_digest: str
    cache_key: str
    cache_path: Path
    cache_hit: bool
    num_batches: int | None
    calibration_seconds: float
    total_seconds: float
    excluded_nodes: tuple[str, ...] = field(default=())


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
    named = ensure_node_names(model)
    _check_single_float_input(named)
    excluded = _nodes_to_exclude(named, options)

    with tempfile.TemporaryDirectory(prefix="tde-int8-") as tmp:
        work = Path(tmp)
        model_bytes = named.SerializeToString(deterministic=True)
        prepared = _pre_process(named, work, say) if options.pre_process else named

        items: list[np.ndarray] | None = None
        if data_digest is None:
            items = split_to_model_batch(batches, _static_batch(prepared))
            data_digest = digest_batches(items)
        key = cache_key(model_bytes, data_digest, options.method, options.calibration_options())
        directory = cache_dir if cache_dir is not None else default_cache_dir()
        cache_path = directory / f"{key}.json"
        hit = cache_path.is_file()

        reader: BatchReader | None = None
        if hit:
            say(f"calibration: reusing cached ranges {cache_path}")
        else:
            if items is None:
                items = split_to_model_batch(batches, _static_batch(prepared))
            say(f"calibration: {len(items)} batch(es), method {options.method}")
            reader = BatchReader(prepared.graph.input[0].name, items, progress)
        try:
            quantized = _quantize(prepared, work, reader, options, excluded, cache_path)
        except (ValueError, KeyError) as exc:
            if hit:
                raise CalibrationError(
                    f"calibration cache {cache_path} is unreadable ({exc}); delete it and rebuild"
                ) from exc
            raise PrecisionError(f"INT8 quantization failed: {exc}") from exc

    _copy_metadata(model, quantized)
    try:
        onnx.checker.check_model(quantized, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise PrecisionError(f"INT8 quantization produced an invalid graph: {exc}") from exc
    total = time.perf_counter() - started
    calib_seconds = reader.seconds if reader is not None else 0.0
    say(f"calibration: {'cached' if hit else f'{calib_seconds:.1f} s'}, quantization total {total:.1f} s")
    return Int8Result(
        model=quantized,
        method=options.method,
        calibration_digest=data_digest,
        cache_key=key,
        cache_path=cache_path,
        cache_hit=hit,
        num_batches=len(items) if items is not None else None,
        calibration_seconds=calib_seconds,
        total_seconds=total,
        excluded_nodes=excluded,
    )


def default_nodes_to_exclude(model: onnx.ModelProto) -> tuple[str, ...]:
    """The head tail kept in float by default (names after :func:`ensure_node_names`)."""
    return find_detection_head(ensure_node_names(model)).tail


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


def _pre_process(model: onnx.ModelProto, work: Path, say: ProgressFn) -> onnx.ModelProto:
    """onnxruntime's recommended pre-pass (symbolic shape inference), without graph optimisation.

    Optimisation would fuse and rename nodes, and the exclusion list addresses nodes by name.
    Symbolic inference gives up on some dynamic graphs (and then drops a temp file in the current
    directory), so it runs inside ``work`` and falls back to plain ONNX shape inference.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source = work / "named.onnx"
    target = work / "preprocessed.onnx"
    onnx.save_model(model, source)
    with _quiet_onnxruntime_logs(), _inside(work):
        try:
            quant_pre_process(str(source), str(target), skip_optimization=True)
        except Exception as exc:  # noqa: BLE001 -- onnxruntime raises a bare Exception here
            say(f"calibration: symbolic shape inference failed ({exc}); using ONNX shape inference")
            quant_pre_process(str(source), str(target), skip_optimization=True, skip_symbolic_shape=True)
    say("calibration: shape inference done")
    return onnx.load_model(target)


@contextlib.contextmanager
def _inside(directory: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


def _quantize(
    model: onnx.ModelProto,
    work: Path,
    reader: BatchReader | None,
    options: Int8Options,
    excluded: Sequence[str],
    cache_path: Path,
) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    extra: dict[str, object] = {
        "ActivationSymmetric": True,
        "WeightSymmetric": True,
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
    output = work / "int8.onnx"
    with _quiet_onnxruntime_logs():
        quantize_static(
            model,
            output,
            calibration_data_reader=reader,
            quant_format=QuantFormat.QDQ,
            per_channel=options.per_channel,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=list(excluded),
            calibrate_method=getattr(CalibrationMethod, _ORT_METHOD_NAMES[options.method]),
            extra_options=extra,
            calibration_cache_path=pending,
        )
    if pending != cache_path:
        pending.replace(cache_path)
    return onnx.load_model(output)


def _copy_metadata(source: onnx.ModelProto, target: onnx.ModelProto) -> None:
    """Keep the exporter's metadata (class names, imgsz) that inspection reads."""
    props = {p.key: p.value for p in target.metadata_props}
    props.update({p.key: p.value for p in source.metadata_props})
    props["triton_detection_ensemble.precision"] = "int8"
    onnx.helper.set_model_props(target, props)


@contextlib.contextmanager
def _quiet_onnxruntime_logs() -> Iterator[None]:
    """Keep onnxruntime's quantizer chatter off stdout and drop its pre-processing advice (done)."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        logger.setLevel(level)
