"""The family matrix: every Ultralytics detection family x batch mode x precision x target, built and checked.

Helpers of ``test_family_matrix.py``: the build options of one cell, the outcome of one cell, and the README
table rendered from the outcomes (the test fails when the README disagrees with what it measured).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from generator.builder.spec.options import (
    BuildOptions,
    GateOptions,
    Int8Tool,
    Precision,
    PrecisionOptions,
    Target,
    TensorRTOptions,
)
from generator.builder.stages.precision.stage import PrecisionTransform, make_precision_transform
from generator.model.onnx_inspect import DetectorInfo
from tests.fixtures import ultralytics as fixtures

# "int8-modelopt": --precision int8 --int8-tool modelopt. Model Optimizer takes 15-20 s of CPU per graph here
# (the rest of a family's matrix about 45 s), so it runs on the dynamic exports of the default family and of the
# end-to-end one, for the FP16-float targets (cells outside: "not tested").
PRECISIONS = ("fp32", "fp16", "int8", "int8-modelopt")
BUILD_PRECISION: dict[str, Precision] = {"fp32": "fp32", "fp16": "fp16", "int8": "int8", "int8-modelopt": "int8"}
MODELOPT_FAMILIES = ("yolo11", "yolo26")
TARGETS: tuple[Target, ...] = ("embedded", "onnxruntime", "tensorrt")
README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN, END = "<!-- family-matrix:begin -->", "<!-- family-matrix:end -->"
CALIBRATION_IMAGES = 8
# The build default. The refilled networks' scores (tests/fixtures/ultralytics) depend strongly on the scene: on
# the test scenes between none and about two thousand anchors pass it, and NMS leaves 0 to 100 boxes per image.
CONF_THRESHOLD = BuildOptions().conf_threshold
MAX_BATCH = 4


def tested(family: str, mode: str, precision: str, target: str) -> bool:
    return precision != "int8-modelopt" or (family in MODELOPT_FAMILIES and mode == "dynamic"
                                            and target != "onnxruntime")


@dataclass
class Cell:
    """What one (family, batch mode, precision, target) build came to."""

    built: bool = False
    parser_clean: bool = False
    served: bool | None = None  # None: not served here (onnxruntime, tensorrt)
    refused: str = ""  # the build's own error message
    fp32_fallback: int = 0  # nodes the conversion kept in FP32 to stay consistent (from the manifest)
    tested: bool = True

    def text(self) -> str:
        if not self.tested:
            return "not tested"
        if self.refused:
            return f"refused: {self.refused}"
        words = ["served" if self.served else "built"] if self.built else ["not built"]
        if self.parser_clean:
            words.append("parser-clean")
        if self.fp32_fallback:
            words.append(f"{self.fp32_fallback} FP32 fallback")
        return ", ".join(words)


def model_name(family: str, mode: str, precision: str, target: str) -> str:
    return f"{family}_{mode}_{precision}_{target}".replace("-", "_")


def precision_options(precision: str, calib_dir: Path) -> PrecisionOptions:
    tool: Int8Tool = "modelopt" if precision == "int8-modelopt" else "ort"
    return PrecisionOptions(calib_images=calib_dir, calib_count=CALIBRATION_IMAGES, int8_tool=tool)


def options(family: str, mode: str, precision: str, target: Target, calib_dir: Path) -> BuildOptions:
    """One cell's build: the defaults, except a small batch and one instance per step (many ensembles share
    one server here), calibration on a few scenes, no accuracy gate (random weights have no accuracy to
    keep; the test compares served detections with ONNX Runtime instead), no speed gate (every precision is
    served as built, whatever it costs on this CPU) and a deferred plan."""
    return BuildOptions(
        name=model_name(family, mode, precision, target), target=target, precision=BUILD_PRECISION[precision],
        max_batch=MAX_BATCH, instances=(1, 1, 1),
        calibration=precision_options(precision, calib_dir),
        gate=GateOptions(enabled=False, speed_gate="off"), tensorrt=TensorRTOptions(defer_plan=target == "tensorrt"),
    )


class SharedPrecision:
    """The real precision stage, run once per model and graph type and reused by every target that gets
    the same graph (INT8's float layers are FP32 for ``onnxruntime``, FP16 elsewhere)."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str, str, str], tuple[onnx.ModelProto, dict[str, str]]] = {}

    def transform(self, key: str) -> PrecisionTransform:
        def run(model: onnx.ModelProto, info: DetectorInfo, build: BuildOptions
                ) -> tuple[onnx.ModelProto, dict[str, str]]:
            from generator.builder.stages.precision.stage import int8_float_dtype

            float_type = int8_float_dtype(build.calibration, build) if build.precision == "int8" else "-"
            slot = (key, build.precision, float_type, str(build.calibration))
            if slot not in self._done:
                self._done[slot] = make_precision_transform(build.calibration)(model, info, build)
            converted, facts = self._done[slot]
            copy = onnx.ModelProto()
            copy.CopyFrom(converted)
            return copy, dict(facts)

        return run


def write_calibration_images(directory: Path) -> Path:
    from generator.synthetic import encode, make_scene

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(17)
    for index in range(CALIBRATION_IMAGES):
        (directory / f"scene_{index}.jpg").write_bytes(encode(make_scene(rng, 640, 480).image))
    return directory


def render_table(cells: Mapping[tuple[str, str, str, str], Cell], refusals: Mapping[str, str]) -> str:
    """The README table: one row per family and precision, one column per target; a cell names both batch
    modes when they differ."""
    lines = ["| family | precision | " + " | ".join(f"`{t}`" for t in TARGETS) + " |",
             "|---|---|" + "---|" * len(TARGETS)]
    for family in fixtures.FAMILIES:
        for precision in PRECISIONS:
            row = []
            for target in TARGETS:
                texts = {mode: cells[family, mode, precision, target].text() for mode in fixtures.BATCH_MODES}
                if len(set(texts.values())) == 1:
                    row.append(next(iter(texts.values())))
                else:
                    row.append("; ".join(f"{mode}: {text}" for mode, text in texts.items()))
            lines.append(f"| {family} | {precision} | " + " | ".join(row) + " |")
    for head, reason in refusals.items():
        others = ["refused"] * (len(TARGETS) - 1)
        lines.append(f"| {head} (yolo11n-{head}) | any | " + " | ".join([f"refused: {reason}", *others]) + " |")
    return "\n".join(lines)


def readme_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    """The generated table between ``begin`` and ``end`` in the README's ``text``."""
    match = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    if match is None:
        raise AssertionError(f"README.md has no {begin} ... {end} block")
    return match.group(1)


def replace_readme_block(text: str, table: str, begin: str = BEGIN, end: str = END) -> str:
    return re.sub(re.escape(begin) + r"\n.*?\n" + re.escape(end), lambda _m: f"{begin}\n{table}\n{end}", text,
                  flags=re.S)


def readme_table(text: str) -> str:
    return readme_block(text)


def replace_readme_table(text: str, table: str) -> str:
    return replace_readme_block(text, table)

