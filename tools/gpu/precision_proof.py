"""Issue 36 on the lent GPU: the layer-wise diagnosis and the speed gate with ONNX Runtime's CUDA provider.

Run on the device from a checkout, with repositories built here (``generator build --speed-gate record``: the
served graph in the precision asked for) and a few control images::

    python -m tools.gpu.precision_proof --data DIR --out DIR

``DIR`` holds ``demo_fp32``, ``demo_fp16``, ``demo_int8`` (repositories of one source ONNX, same ``--max-batch``),
``source.onnx`` (that FP32 source) and ``images/*.jpg``. For each lowered build it prints, and writes as JSON:
the layer-wise report on the CPU provider and on the CUDA provider against the FP32 reference on the CPU (do both
name the same first layers?), and the speed gate's paired rounds with the CUDA provider against the FP32 build's
served graph (what ``generator build --device gpu`` records in ``precision_facts.speed_gate``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, cast

import onnx

from generator.builder.spec.options import BuildOptions
from generator.builder.stages.speed_gate import speed_gate
from generator.evaluation import layerwise
from generator.model.onnx_inspect import DetectorInfo, TensorInfo, inspect_onnx
from generator.repository.manifest import read_manifest

CPU = ("CPUExecutionProvider",)
CUDA = ("CUDAExecutionProvider",)


def _detector(repository: Path) -> tuple[Path, Any]:
    manifest = read_manifest(repository)
    return repository / f"{manifest.name}_detector" / "1" / "model.onnx", manifest


def _diagnose(source: onnx.ModelProto, served: onnx.ModelProto, images: Sequence[bytes], manifest: Any,
              providers: tuple[str, ...]) -> dict[str, Any]:
    image_size = tuple(manifest.detector.image_size)
    started = time.perf_counter()
    report = layerwise.compare_layers(source, served, images, image_size, manifest.precision,
                                      layerwise.decisions_from_facts(manifest.precision_facts), providers)
    return {"providers": list(providers), "seconds": round(time.perf_counter() - started, 2),
            "summary": layerwise.summary(report), "report": json.loads(layerwise.report_files(report)["layerwise.json"])}


def _served_info(info: DetectorInfo, served: onnx.ModelProto) -> DetectorInfo:
    """The served graph's input as the speed gate feeds it: uint8 BGR NHWC (the build's normalisation prefix).
    Derived here rather than through generator.builder.pipeline, whose imports the device has no packages for."""
    batch, _, height, width = info.input.shape
    served_input = TensorInfo(served.graph.input[0].name, onnx.TensorProto.UINT8, (batch, height, width, 3))
    return replace(info, input=served_input)


def _names(diagnosis: dict[str, Any], key: str) -> list[str]:
    return [layer["node"] for layer in diagnosis["report"][key]]


def prove(data: Path, out: Path, precision: str, cuda_providers: tuple[str, ...] = CUDA) -> dict[str, Any]:
    source = onnx.load(str(data / "source.onnx"))
    images = [p.read_bytes() for p in sorted((data / "images").glob("*.jpg"))]
    served_path, manifest = _detector(data / f"demo_{precision}")
    fp32_path, _ = _detector(data / "demo_fp32")
    served = onnx.load(str(served_path))
    cpu = _diagnose(source, served, images, manifest, CPU)
    cuda = _diagnose(source, served, images, manifest, cuda_providers)
    print(f"[{precision}] layer-wise, CPU provider: {cpu['summary']}")
    print(f"[{precision}] layer-wise, {cuda_providers[0]}: {cuda['summary']}")
    device = "cpu" if cuda_providers == CPU else "gpu"
    options = BuildOptions(precision=cast(Any, precision), max_batch=manifest.max_batch or 8, device=cast(Any, device))
    options = replace(options, gate=replace(options.gate, speed_gate="keep-faster"))
    info = _served_info(inspect_onnx(data / "source.onnx", tuple(manifest.detector.image_size)), served)
    decision = speed_gate(onnx.load(str(fp32_path)), served, info, options)
    for key in ("first_jumps", "worst"):
        print(f"[{precision}] {key}: CPU {_names(cpu, key)[:5]}; {cuda_providers[0]} {_names(cuda, key)[:5]}")
    print(f"[{precision}] speed gate, {decision.measured_on}: {decision.reason}")
    result = {"precision": precision, "layerwise_cpu": cpu, "layerwise_cuda": cuda,
              "first_jumps": {"cpu": _names(cpu, "first_jumps"), "cuda": _names(cuda, "first_jumps")},
              "worst": {"cpu": _names(cpu, "worst")[:5], "cuda": _names(cuda, "worst")[:5]}, "speed_gate_cuda": asdict(decision)}
    (out / f"precision-{precision}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu.precision_proof", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--precisions", nargs="+", default=["fp16", "int8"])
    parser.add_argument("--dry-run", action="store_true",
                        help="without a GPU: the CPU provider stands in for CUDA (to find bugs before device time)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    for precision in args.precisions:
        prove(args.data, args.out, precision, CPU if args.dry_run else CUDA)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
