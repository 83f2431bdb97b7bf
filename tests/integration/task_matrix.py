"""The task matrix: every Ultralytics task head x batch mode x precision x target, built and checked.

Helpers of ``test_task_matrix.py``, the task heads' counterpart of ``family_matrix.py`` (whose build options,
cells and shared precision stage it reuses): what the served ensemble returns against the served graph run
in-process through the serving post-processing, and the README table rendered from the outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from clients.rle import decode_counts
from generator.serving.contract import KEYPOINTS, MASKS, ROTATED_BOXES, TASK_OUTPUTS, TOP_CLASSES, TOP_SCORES
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import TASK_FIXTURES
from tests.integration.family_matrix import README, TARGETS, Cell, readme_block, replace_readme_block

# Model Optimizer's INT8 is tried on detection families only (family_matrix.MODELOPT_FAMILIES).
PRECISIONS = ("fp32", "fp16", "int8")
HEADS = {key.removesuffix("-static"): task for key, task in TASK_FIXTURES.items()}  # fixture head -> task
EXPORTS = {"pose": "yolo11n-pose", "obb": "yolo11n-obb", "seg": "yolo11n-seg", "classify": "yolo11n-cls"}
BEGIN, END = "<!-- task-matrix:begin -->", "<!-- task-matrix:end -->"
PIXELS, SCORES = 1e-3, 1e-4
# Each served mask against the in-process one: this process decodes and letterboxes with the test environment's
# OpenCV, the server with its stub environment's pinned one, and their resizes differ in the last bit (OpenCV 4.14
# and 5.1 against 4.11: boxes within 1e-3 px, a few mask pixels flipped at the threshold). Equal in all but these.
MASK_IOU = 0.99


def _mask_pixels(text: bytes) -> np.ndarray:
    counts = decode_counts(text)
    values = np.zeros(len(counts), dtype=bool)
    values[1::2] = True
    return np.repeat(values, counts)


def _assert_masks_agree(served: list[bytes], expected: list[bytes]) -> None:
    for index, (got, want) in enumerate(zip(served, expected, strict=True)):
        a, b = _mask_pixels(got), _mask_pixels(want)
        assert a.size == b.size, f"masks (RLE): mask {index} covers {a.size} pixels, not {b.size}"
        union = int(np.count_nonzero(a | b))
        iou = np.count_nonzero(a & b) / union if union else 1.0
        assert iou >= MASK_IOU, f"masks (RLE): mask {index} IoU {iou:.4f} < {MASK_IOU}"


def served_vs_in_process(served: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], task: str) -> int:
    """Assert one image's served outputs equal the in-process ones; return its detections (classes for classify)."""
    if task == "classify":
        np.testing.assert_array_equal(served[TOP_CLASSES], expected[TOP_CLASSES])
        np.testing.assert_allclose(served[TOP_SCORES], expected[TOP_SCORES], atol=SCORES)
        return len(served[TOP_CLASSES])
    count = int(np.asarray(served["num_detections"]).reshape(-1)[0])
    assert count == int(np.asarray(expected["num_detections"]).reshape(-1)[0]), "detection count"
    np.testing.assert_allclose(served["detection_boxes"][:count], expected["detection_boxes"][:count], atol=PIXELS)
    np.testing.assert_allclose(served["detection_scores"][:count], expected["detection_scores"][:count], atol=SCORES)
    np.testing.assert_array_equal(served["detection_classes"][:count], expected["detection_classes"][:count])
    if task == "pose":
        np.testing.assert_allclose(served[KEYPOINTS][:count], expected[KEYPOINTS][:count], atol=PIXELS)
    elif task == "obb":
        np.testing.assert_allclose(served[ROTATED_BOXES][:count], expected[ROTATED_BOXES][:count], atol=PIXELS)
    elif task == "segment":
        _assert_masks_agree(list(served[MASKS][:count]), list(expected[MASKS][:count]))
    return count


def in_process(graph: Path, source: Path, task: str, image: bytes, manifest: Mapping) -> dict[str, np.ndarray]:
    """The served graph through the serving preprocess and post-processing, in this process: what the ensemble
    returns for ``image`` (the outputs of TASK_OUTPUTS[task], one image)."""
    from generator.model.onnx_inspect import inspect_onnx
    from generator.serving.batch import prepare_batch, to_float_nchw
    from generator.serving.crop import center_crop_into
    from generator.serving.runner import OnnxRunner
    from generator.serving.tasks import HeadSpec, postprocess_task, top_classes

    info = inspect_onnx(source)
    runner = OnnxRunner(str(graph))
    place = {"place": center_crop_into, "reduced_decode": False} if task == "classify" else {}
    batch = prepare_batch([image], info.image_size, **place)  # type: ignore[arg-type]
    pixels = batch.images if runner.input_type == "tensor(uint8)" else to_float_nchw(
        batch.images, np.float16 if "float16" in runner.input_type else np.float32)
    outputs = dict(zip(runner.output_names, runner.run(pixels), strict=True))
    head = outputs[info.output.name]
    if task == "classify":
        from generator.builder.spec.options import BuildOptions

        return {k: v[0] for k, v in top_classes(head, BuildOptions().top_k).items()}  # the matrix builds' top-k
    thresholds = manifest["thresholds"]
    result = postprocess_task(head, HeadSpec(info.layout, info.num_classes, info.kpt_shape), batch.letterbox,
                              thresholds["conf"], thresholds["iou"], thresholds["max_detections"],
                              outputs[info.protos.name] if info.protos is not None else None)
    found = {"num_detections": result.detections.num_detections, "detection_boxes": result.detections.boxes,
             "detection_scores": result.detections.scores, "detection_classes": result.detections.classes,
             **result.extras}
    return {name: found[name][0] for name in TASK_OUTPUTS[task]}


def render_table(cells: Mapping[tuple[str, str, str, str], Cell]) -> str:
    """The README table: one row per task head and precision, one column per target; a cell names both batch
    modes when they differ."""
    lines = ["| task (export) | precision | " + " | ".join(f"`{t}`" for t in TARGETS) + " |",
             "|---|---|" + "---|" * len(TARGETS)]
    for head, task in HEADS.items():
        for precision in PRECISIONS:
            row = []
            for target in TARGETS:
                texts = {mode: cells[head, mode, precision, target].text() for mode in fixtures.BATCH_MODES}
                if len(set(texts.values())) == 1:
                    row.append(next(iter(texts.values())))
                else:
                    row.append("; ".join(f"{mode}: {text}" for mode, text in texts.items()))
            lines.append(f"| {task} ({EXPORTS[head]}) | {precision} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def readme_table(text: str) -> str:
    return readme_block(text, BEGIN, END)


def replace_readme_table(text: str, table: str) -> str:
    return replace_readme_block(text, table, BEGIN, END)


__all__ = ["README", "TARGETS", "Cell"]
