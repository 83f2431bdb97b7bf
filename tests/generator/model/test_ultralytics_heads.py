"""Real Ultralytics exports of every task head are recognised at inspection and a build serves each; a build would
refuse a task it does not serve, by name.

The exports are yolo11n's pose, segmentation, OBB and classification models from the packaged YAMLs
(``tests/fixtures/ultralytics``); the detection families themselves are the family matrix
(``tests/integration/test_family_matrix.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import pytest

from generator.builder.spec.options import BuildOptions, GateOptions, SpecError
from generator.builder.tasks import SERVED_TASKS, require_served_task
from generator.errors import ModelInspectionError
from generator.model.onnx_inspect import inspect_onnx
from generator.model.tasks import TASKS
from tests.fixtures import ultralytics as fixtures

# fixture -> (task, layout, head shape, extra output shape, kpt_shape) as Ultralytics exports them at 320x320.
HEADS = {
    "pose": ("pose", "pose", (1, 4 + 80 + 17 * 3, 2100), None, (17, 3)),
    "seg": ("segment", "segment", (1, 4 + 80 + 32, 2100), (1, 32, 80, 80), None),
    "obb": ("obb", "obb", (1, 4 + 80 + 1, 2100), None, None),
    "classify": ("classify", "classify", (1, 1000), None, None),
}


@pytest.mark.parametrize("head", fixtures.TASK_HEADS)
def test_every_task_head_is_recognised_from_its_metadata_and_outputs(head: str, tmp_path: Path) -> None:
    info = inspect_onnx(fixtures.write(f"{head}-static", tmp_path))
    task, layout, shape, protos, kpt_shape = HEADS[head]
    assert (info.task, info.layout, info.output.shape, info.kpt_shape) == (task, layout, shape, kpt_shape)
    assert (info.protos.shape if info.protos else None) == protos
    assert info.num_classes == (1000 if head == "classify" else 80) == len(info.class_names)
    assert info.image_size == (320, 320) and info.static_batch == 1


@pytest.mark.parametrize("head", ["seg", "classify"])
def test_heads_are_recognised_without_the_ultralytics_metadata(head: str, tmp_path: Path) -> None:
    """A graph whose metadata was stripped (onnxsim, a converter) still names its task from its outputs."""
    model = fixtures.load(f"{head}-static")
    del model.metadata_props[:]
    path = tmp_path / "stripped.onnx"
    onnx.save(model, str(path))
    info = inspect_onnx(path)
    assert info.task == HEADS[head][0]
    assert info.class_names[:2] == ("class_0", "class_1")


def test_a_build_serves_every_task_it_recognises(tmp_path: Path) -> None:
    assert not fixtures.UNSERVED_HEADS and set(SERVED_TASKS) == set(TASKS)
    for head in fixtures.TASK_HEADS:
        require_served_task(inspect_onnx(fixtures.write(f"{head}-static", tmp_path)))  # raises if refused


def test_a_task_a_build_does_not_serve_is_refused_by_name(tmp_path: Path) -> None:
    """The refusal stays for a task recognised before its step exists (every task is served today)."""
    info = dataclasses.replace(inspect_onnx(fixtures.write("classify-static", tmp_path)), task="depth")
    with pytest.raises(ModelInspectionError, match=r"is an Ultralytics 'depth' export \(head 'Classify', output "
                       r"\[1, 1000\]\); the ensemble serves the tasks detect"):
        require_served_task(info)


@pytest.mark.parametrize("family", fixtures.FAMILIES)
def test_every_detection_family_is_recognised(family: str, tmp_path: Path) -> None:
    for mode in fixtures.BATCH_MODES:
        info = inspect_onnx(fixtures.write(f"{family}-{mode}", tmp_path))
        expected = "end2end" if family in ("yolov10", "yolo26") else "v8"
        assert (info.layout, info.num_classes, info.image_size) == (expected, 80, (320, 320))
        assert info.static_batch == (1 if mode == "static" else None)


@pytest.mark.parametrize(("head", "options", "message"), [
    ("pose", BuildOptions(nms_in_graph=True), "--nms-in-graph builds ONNX NonMaxSuppression for detection heads"),
    ("obb", BuildOptions(precision="fp16", gate=GateOptions(images=Path("control"), labels=Path("coco.json"))),
     "--validate-labels: the accuracy gate of the obb export compares it with its FP32 build's own outputs"),
    ("seg", BuildOptions(target="tensorrt"), "--target tensorrt binds one detector output"),
    ("classify", BuildOptions(preprocess_device="gpu"), "--preprocess-device gpu letterboxes"),
])
def test_a_served_task_refuses_the_options_its_step_cannot_honour(head: str, options: BuildOptions, message: str,
                                                                   tmp_path: Path) -> None:
    info = inspect_onnx(fixtures.write(f"{head}-static", tmp_path))
    with pytest.raises(SpecError, match=message):
        require_served_task(info, options)
    require_served_task(info, BuildOptions())  # the defaults serve it


def test_box_measurements_refuse_a_task_export_by_name(tmp_path: Path) -> None:
    from generator.evaluation.reference import ReferencePipeline

    with pytest.raises(ModelInspectionError, match=r"the reference pipeline .* measures detection boxes; this is an "
                       r"Ultralytics 'pose' export"):
        ReferencePipeline(fixtures.write("pose-static", tmp_path))
