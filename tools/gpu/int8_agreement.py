"""Why an INT8 graph's detections differ between ONNX Runtime's CPU and CUDA providers, measured on the CPU.

    python -m tools.gpu.int8_agreement [--images 48] [--imgsz 320]

Builds the yolo11 structure fixture (tests/fixtures/ultralytics) in FP32, and in INT8 with FP16 and with FP32 float
layers, then compares each served graph's detections (the NMS step's, F1 as generator/serving/provider_check.py
counts it) on synthetic 1280x720 scenes against:

- the same graph with the CPU provider's graph optimisations off (no QDQ fusion into integer kernels: the float Q/DQ
  simulation the CUDA provider runs). Equal detections mean the accuracy gate, which runs the CPU provider with
  them on, measured what the CUDA provider computes;
- the input moved by one grey level on 5 % of the pixels (the GPU decode's differences);
- the float weights rounded to TF32's 10-bit mantissa (what Ampere-and-later convolutions do to FP32 operands).

Lab code for issue 28 (its printed table is in docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _tf32(source: Path, target: Path) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32 and array.size > 16:
            bits = ((array.view(np.uint32).astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32)
            init.CopyFrom(numpy_helper.from_array(bits.view(np.float32), init.name))
    onnx.save(model, str(target))


def _detections(path: Path, images: np.ndarray, letterbox: np.ndarray, optimise: bool = True) -> list[Any]:
    import onnxruntime as ort

    from generator.serving.nms import postprocess

    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimise
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    raw = np.concatenate([session.run(None, {name: images[i:i + 8]})[0] for i in range(0, len(images), 8)])
    found = postprocess(raw, "v8_reduced", letterbox, 0.25, 0.45, 300)
    return [(found.boxes[i, :n], found.scores[i, :n], found.classes[i, :n])
            for i, n in enumerate(found.num_detections[:, 0])]


def _build(work: Path, imgsz: int) -> dict[str, Path]:
    import onnx

    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import (
        BuildOptions,
        GateOptions,
        Int8Float,
        Precision,
        PrecisionOptions,
    )
    from generator.synthetic import encode, make_scene
    from tests.fixtures.ultralytics import load

    source = work / "yolo11.onnx"
    onnx.save(load("yolo11-dynamic"), str(source))
    calib = work / "calib"
    calib.mkdir()
    rng = np.random.default_rng(17)  # the family matrix's calibration scenes
    for index in range(8):
        (calib / f"scene_{index}.jpg").write_bytes(encode(make_scene(rng, 640, 480).image))
    graphs = {}
    cases: tuple[tuple[str, Precision, Int8Float], ...] = (
        ("fp32", "fp32", "auto"), ("int8, fp16 float layers", "int8", "fp16"), ("int8, fp32 float layers", "int8", "fp32"))
    for label, precision, float_type in cases:
        options = BuildOptions(name="y", precision=precision, max_batch=8, service_ms=10.0, image_size=(imgsz, imgsz),
                               calibration=PrecisionOptions(calib_images=calib, calib_count=8, int8_float=float_type),
                               gate=GateOptions(enabled=False))
        out = work / label.replace(" ", "_").replace(",", "")
        build_repository(source, out, options)
        graphs[label] = out / "y_detector" / "1" / "model.onnx"
    return graphs


def main(argv: list[str] | None = None) -> int:
    from generator.serving.batch import prepare_batch
    from generator.serving.provider_check import agreement
    from generator.synthetic import encode, make_scene

    parser = argparse.ArgumentParser(prog="python -m tools.gpu.int8_agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--imgsz", type=int, default=320)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(5)
    batch = prepare_batch([encode(make_scene(rng, 1280, 720).image) for _ in range(args.images)], (args.imgsz, args.imgsz))
    noise = np.random.default_rng(1)
    moved = batch.images.astype(np.int16)
    mask = noise.random(moved.shape[:3]) < 0.05
    moved[mask] += noise.choice([-1, 1], size=(int(mask.sum()), 3)).astype(np.int16)
    nudged = dataclasses.replace(batch, images=np.clip(moved, 0, 255).astype(np.uint8))
    print("| graph | detections | optimisations off | +-1 grey on 5 % of pixels | TF32-rounded weights |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, path in _build(Path(tmp), args.imgsz).items():
            base = _detections(path, batch.images, batch.letterbox)
            _tf32(path, Path(tmp) / "tf32.onnx")
            cells = [agreement(base, _detections(path, batch.images, batch.letterbox, optimise=False))[0],
                     agreement(base, _detections(path, nudged.images, nudged.letterbox))[0],
                     agreement(base, _detections(Path(tmp) / "tf32.onnx", batch.images, batch.letterbox))[0]]
            print(f"| {label} | {sum(len(d[1]) for d in base)} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
