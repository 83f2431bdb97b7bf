"""The GPU detector's load-time provider check, on real served graphs of the yolo11 structure fixture.

The CUDA provider's rounding is the boundary this machine cannot run; it is stood in for by the same graph on the
CPU provider with its input moved by one grey level on 5 % of the pixels (what the GPU decode and TF32 arithmetic
do to an activation): an FP32 graph shrugs that off, the INT8 graph's detections change and the check refuses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, GateOptions, Precision, PrecisionOptions
from generator.serving.provider_check import (
    CHECK_FILE,
    ProviderDisagreement,
    agreement,
    check_provider,
    load_control,
    per_image,
)
from generator.serving.runner import OnnxRunner
from tests.fixtures.ultralytics import load
from tests.integration.family_matrix import write_calibration_images


def _build(tmp: Path, precision: Precision) -> Path:
    import onnx

    source = tmp / "yolo11.onnx"
    if not source.exists():
        onnx.save(load("yolo11-dynamic"), str(source))
        write_calibration_images(tmp / "calib")
    options = BuildOptions(name="y", device="gpu", precision=precision, max_batch=4, service_ms=10.0,
                           calibration=PrecisionOptions(calib_images=tmp / "calib", calib_count=8),
                           gate=GateOptions(enabled=False))
    build_repository(source, tmp / precision, options)
    return tmp / precision / "y_detector" / "1"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("provider")
    precisions: tuple[Precision, ...] = ("fp32", "int8")
    return {precision: _build(tmp, precision) for precision in precisions}


def nudged(runner: OnnxRunner) -> Any:
    """The runner with its input moved by +-1 grey level on 5 % of the pixels (a seeded draw)."""
    def run(images: np.ndarray) -> list[np.ndarray]:
        rng = np.random.default_rng(1)
        moved = images.astype(np.int16)
        mask = rng.random(moved.shape[:3]) < 0.05
        moved[mask] += rng.choice([-1, 1], size=(int(mask.sum()), 3)).astype(np.int16)
        return runner.run(np.clip(moved, 0, 255).astype(np.uint8))
    return run


def test_gpu_builds_store_the_control_images_and_name_them_in_the_config(folders: dict[str, Path]) -> None:
    for folder in folders.values():
        control = load_control(folder / CHECK_FILE)
        assert control.images.shape == (4, 320, 320, 3) and control.images.dtype == np.uint8
        assert control.layout == "v8_reduced" and sum(len(r[1]) for r in control.reference) >= 10
        config = (folder.parent / "config.pbtxt").read_text()
        assert 'key: "provider_check"' in config and f'string_value: "{CHECK_FILE}"' in config


def test_the_same_provider_agrees_and_is_served(folders: dict[str, Path]) -> None:
    for folder in folders.values():
        said = check_provider(OnnxRunner(str(folder / "model.onnx")).run, folder / CHECK_FILE, "the CPU provider")
        assert "F1 1.000" in said


def test_fp32_shrugs_off_rounding_and_int8_is_refused_by_name(folders: dict[str, Path]) -> None:
    fp32 = folders["fp32"]
    said = check_provider(nudged(OnnxRunner(str(fp32 / "model.onnx"))), fp32 / CHECK_FILE, "the nudged provider")
    assert float(said.split("F1 ")[1].split()[0]) >= 0.95
    int8 = folders["int8"]
    with pytest.raises(ProviderDisagreement, match=r"the nudged provider agrees .* F1 0\.[0-8]\d\d .* below the 0\.9 "
                       r"this repository requires.*--precision fp16 or fp32"):
        check_provider(nudged(OnnxRunner(str(int8 / "model.onnx"))), int8 / CHECK_FILE, "the nudged provider")
    relaxed = check_provider(nudged(OnnxRunner(str(int8 / "model.onnx"))), int8 / CHECK_FILE, "the nudged provider",
                             min_agreement=0.5)
    assert "below" not in relaxed


def test_agreement_counts_tiny_identical_boxes_and_classes() -> None:
    box = np.array([[10, 10, 10.4, 10.2]], dtype=np.float32)  # zero-ish area: IoU says nothing, corners do
    one = (box, np.array([0.9], np.float32), np.array([3], np.int32))
    assert agreement([one], [one]) == (1.0, 2)
    other_class = (box, np.array([0.9], np.float32), np.array([4], np.int32))
    assert agreement([one], [other_class])[0] == 0.0
    nothing = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    assert agreement([nothing], [nothing]) == (1.0, 0)


def test_too_few_control_detections_are_served_with_a_note(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = folders["int8"]
    control = load_control(folder / CHECK_FILE)
    raw = OnnxRunner(str(folder / "model.onnx")).run(control.images)[0]
    raw[:, 4, :] = 0.0  # no score passes the threshold
    from generator.serving.provider_check import save_control

    empty = tmp_path / CHECK_FILE
    empty.write_bytes(save_control(control.images, control.letterbox, control.layout, control.thresholds, raw))
    assert per_image(raw, control)[0][0].shape == (0, 4)
    said = check_provider(nudged(OnnxRunner(str(folder / "model.onnx"))), empty, "the nudged provider")
    assert said.endswith("too few detections to judge, served")
