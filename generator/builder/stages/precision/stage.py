"""The build's precision stage: FP16 conversion or INT8 Q/DQ calibrated through the production preprocess."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx

from generator.builder.spec.options import BuildOptions, PrecisionOptions
from generator.builder.stages.precision.fp16 import Fp32Fallback
from generator.builder.stages.precision.int8 import FloatDtype
from generator.errors import GeneratorError
from generator.evaluation.gate import IMAGE_SUFFIXES
from generator.model.onnx_inspect import DetectorInfo
from generator.serving.batch import prepare_batch, to_float_nchw
from generator.serving.crop import center_crop_into
from generator.serving.images import ImageLimits
from generator.serving.letterbox import letterbox_into

logger = logging.getLogger(__name__)
CALIBRATION_BATCH = 8

# Turns the FP32 model into the requested precision: (model, info, options) -> (model, manifest facts).
PrecisionTransform = Callable[[onnx.ModelProto, DetectorInfo, BuildOptions], tuple[onnx.ModelProto, dict[str, str]]]


def calibration_images(directory: Path | None, count: int) -> tuple[list[bytes], str]:
    """Encoded calibration images and a description; default: labelled-domain synthetic scenes."""
    if directory is None:
        from generator.synthetic import encode, make_scene

        rng = np.random.default_rng(7_000_001)
        sizes = ((640, 480), (1280, 720), (480, 640))
        data = [encode(make_scene(rng, *sizes[i % len(sizes)]).image) for i in range(count)]
        return data, f"{count} synthetic scenes"
    if not directory.is_dir():
        raise GeneratorError(f"calibration image folder not found: {directory}")
    files = sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:count]
    if not files:
        raise GeneratorError(f"no calibration images ({', '.join(IMAGE_SUFFIXES)}) in {directory}")
    return [p.read_bytes() for p in files], f"{len(files)} images from {directory}"


def _batches(data: Sequence[bytes], info: DetectorInfo, options: BuildOptions) -> Iterator[np.ndarray]:
    """The exact serving path: header checks, (reduced) decode, letterbox (or centre crop), RGB, /255, dtype."""
    limits = ImageLimits(options.limits.max_bytes, options.limits.max_pixels, options.limits.max_side)
    classify = info.task == "classify"  # a classifier's own preprocess: the centre crop, full-resolution decode
    place = center_crop_into if classify else letterbox_into
    for start in range(0, len(data), CALIBRATION_BATCH):
        batch = prepare_batch(data[start : start + CALIBRATION_BATCH], info.image_size, limits,
                              options.reduced_decode and not classify, place=place)
        if batch.errors:
            position, reason = next(iter(batch.errors.items()))
            raise GeneratorError(f"calibration image {start + position} rejected: {reason}")
        yield to_float_nchw(batch.images, np.float32)


def _digest(data: Sequence[bytes], info: DetectorInfo, options: BuildOptions) -> str:
    digest = hashlib.sha256(f"{info.image_size}|{options.reduced_decode}|".encode())
    for item in data:
        digest.update(hashlib.sha256(item).digest())
    return digest.hexdigest()


def int8_float_dtype(precision: PrecisionOptions, options: BuildOptions) -> FloatDtype:
    """``--int8-float auto``: FP16 (what TensorRT should run), FP32 where an older ONNX Runtime serves it.

    The NGC Triton containers' ONNX Runtime (1.19 in 24.10, 1.28 in 26.08) truncates FP16 QuantizeLinear on
    the CPU (microsoft/onnxruntime#22741, fixed in 1.32), so the gate here would not measure what it serves.
    """
    if precision.int8_float != "auto":
        return precision.int8_float
    return "fp32" if options.target == "onnxruntime" else "fp16"


def fallback_facts(fallback: Sequence[Fp32Fallback]) -> dict[str, str]:
    """The manifest's record of the nodes a conversion kept in FP32 on its own: which, and why."""
    return {"fp32_fallback_nodes": ",".join(f.node for f in fallback),
            "fp32_fallback_reasons": json.dumps({f.node: f.reason for f in fallback}, sort_keys=True)}


def make_precision_transform(precision: PrecisionOptions) -> PrecisionTransform:
    """Return a ``PrecisionTransform`` closed over the precision options."""

    def transform(model: onnx.ModelProto, info: DetectorInfo, options: BuildOptions
                  ) -> tuple[onnx.ModelProto, dict[str, str]]:
        if options.precision == "fp16":
            from generator.builder.stages.precision.fp16 import convert_fp16_report
            from generator.builder.stages.precision.tensorrt_compat import check_tensorrt_compatible

            conversion = convert_fp16_report(model, keep_fp32_nodes=precision.fp16_keep)
            check_tensorrt_compatible(conversion.model, "FP16 graph")
            return conversion.model, {"fp16_keep_nodes": ",".join(precision.fp16_keep),
                                      **fallback_facts(conversion.fallback)}
        return _int8(model, info, options, precision)

    return transform


def _int8(model: onnx.ModelProto, info: DetectorInfo, options: BuildOptions, precision: PrecisionOptions
          ) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Calibrate through the serving preprocess; the result is checked against TensorRT's parser rules."""
    from generator.builder.stages.precision.int8 import Int8Options, quantize_int8
    from generator.builder.stages.precision.tensorrt_compat import quantization_summary

    data, description = calibration_images(precision.calib_images, precision.calib_count)
    result = quantize_int8(
        model,
        _batches(data, info, options),
        Int8Options(method=precision.calib_method, nodes_to_exclude=precision.int8_exclude,
                    tool=precision.int8_tool, float_dtype=int8_float_dtype(precision, options)),
        data_digest=_digest(data, info, options),
    )
    summary = quantization_summary(result.model)
    logger.info("INT8 graph (%s, float layers %s): %s", result.tool, result.float_dtype, summary)
    return result.model, {
        "calibration_method": result.method,
        "calibration_digest": result.calibration_digest,
        "calibration_set": description,
        "calibration_seconds": f"{result.calibration_seconds:.1f}",
        "calibration_cache_hit": str(result.cache_hit).lower(),
        "excluded_nodes": ",".join(result.excluded_nodes),
        "int8_tool": result.tool,
        "int8_float": result.float_dtype,
        "quantization": summary,
        **fallback_facts(result.fp32_fallback),
    }
