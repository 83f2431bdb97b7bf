"""Which Ultralytics task an export serves, read from its metadata and the shapes of its head outputs.

Ultralytics writes ``task`` (and, for pose, ``kpt_shape``) into the ONNX metadata; without it (a converter
or onnxsim dropped it) a second 4-D output gives a segmentation head away and a single 2-D output a classifier.
The task-specific heads are v8 heads with rows appended after the class scores (FIELD-NOTES, 2026-12-06):

- segment: ``[N, 4 + nc + nm, A]`` and the prototypes ``[N, nm, H/4, W/4]`` as a second output;
- pose: ``[N, 4 + nc + K*D, A]``, keypoints already decoded to input pixels (D = 3: x, y, visibility);
- obb: ``[N, 4 + nc + 1, A]``, the rotation angle (radians) last;
- classify: ``[N, nc]``, class probabilities (the export ends with a softmax).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from generator.errors import ModelInspectionError
from generator.model.tensors import TensorInfo

TASKS = ("detect", "segment", "pose", "obb", "classify")
# The head layout each non-detection task decodes with (generator.serving.tasks); detection's come from
# onnx_inspect.detect_layout.
TASK_LAYOUTS = {"segment": "segment", "pose": "pose", "obb": "obb", "classify": "classify"}


@dataclass(frozen=True)
class TaskHead:
    """The task of an export and the outputs its post-processing reads."""

    task: str
    output: TensorInfo  # the head the post-processing decodes (segment: the boxes and coefficients)
    protos: TensorInfo | None = None  # segment: [N, nm, H/4, W/4] mask prototypes
    kpt_shape: tuple[int, int] | None = None  # pose: (keypoints, values per keypoint)


def _kpt_shape(metadata: dict[str, str]) -> tuple[int, int] | None:
    try:
        value = ast.literal_eval(metadata.get("kpt_shape", "None"))
    except (ValueError, SyntaxError):
        return None
    if (isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int) for v in value)
            and value[0] > 0 and value[1] in (2, 3)):
        return int(value[0]), int(value[1])
    return None


def task_of(metadata: dict[str, str], outputs: list[TensorInfo]) -> str:
    """The export's task: its metadata's, else what its outputs show (``detect`` when nothing says more)."""
    task = metadata.get("task")
    if task is not None:
        if task not in TASKS:
            raise ModelInspectionError(f"the ONNX metadata says task '{task}'; the ensemble serves the Ultralytics "
                                       f"tasks {', '.join(TASKS)}")
        return task
    if len(outputs) == 2 and any(len(o.shape) == 4 for o in outputs):
        return "segment"
    if len(outputs) == 1 and len(outputs[0].shape) == 2:
        return "classify"
    if "kpt_shape" in metadata:
        return "pose"
    return "detect"


def task_head(task: str, metadata: dict[str, str], outputs: list[TensorInfo]) -> TaskHead:
    """The outputs of ``task``, checked for the shapes its head must have (detection's: detect_layout)."""
    names = [o.name for o in outputs]
    if task == "detect":
        if len(outputs) != 1:
            raise ModelInspectionError(f"expected one detection output, found {len(outputs)}: {names}; an export "
                                       "of another task is recognised by its Ultralytics 'task' metadata")
        return TaskHead(task, outputs[0])
    if task == "segment":
        heads = [o for o in outputs if len(o.shape) == 3]
        protos = [o for o in outputs if len(o.shape) == 4]
        if len(outputs) != 2 or len(heads) != 1 or len(protos) != 1:
            raise ModelInspectionError(
                f"a segmentation export has two outputs, the 3-D head [N, 4+nc+nm, A] and the 4-D mask "
                f"prototypes [N, nm, H/4, W/4]; this one has {names}")
        return TaskHead(task, heads[0], protos=protos[0])
    if len(outputs) != 1:
        raise ModelInspectionError(f"a {task} export has one output; this one has {names}")
    (output,) = outputs
    if task == "classify":
        if len(output.shape) != 2:
            raise ModelInspectionError(f"output '{output.name}' has shape {list(output.shape)}; a classifier's "
                                       "is [N, nc]")
        return TaskHead(task, output)
    if len(output.shape) != 3:
        raise ModelInspectionError(f"output '{output.name}' has shape {list(output.shape)}; a {task} head is "
                                   "[N, 4+nc+extra, anchors]")
    if task == "pose":
        kpt_shape = _kpt_shape(metadata)
        if kpt_shape is None:
            raise ModelInspectionError(
                f"a pose export needs the 'kpt_shape' metadata (keypoints, 2 or 3) to split its head; found "
                f"{metadata.get('kpt_shape')!r}: export it with Ultralytics (yolo export format=onnx)")
        return TaskHead(task, output, kpt_shape=kpt_shape)
    return TaskHead(task, output)


def extra_rows(head: TaskHead) -> int:
    """Rows of the head after the class scores: mask coefficients, keypoint values or the angle."""
    if head.task == "segment" and head.protos is not None:
        nm = head.protos.shape[1]
        if not isinstance(nm, int):
            raise ModelInspectionError(f"the mask prototypes '{head.protos.name}' have a symbolic channel axis "
                                       f"{list(head.protos.shape)}")
        return nm
    if head.task == "pose" and head.kpt_shape is not None:
        return head.kpt_shape[0] * head.kpt_shape[1]
    return 1 if head.task == "obb" else 0


def task_classes(head: TaskHead, num_names: int | None) -> int:
    """The class count of a task head, checked against the metadata's names when there are some."""
    output = head.output
    if head.task == "classify":
        count = output.shape[1]
        what = "[N, nc]"
    else:
        rows = output.shape[1]
        count = rows - 4 - extra_rows(head) if isinstance(rows, int) else rows
        what = f"[N, 4+nc+{extra_rows(head)}, anchors]"
    if not isinstance(count, int) or count < 1:
        raise ModelInspectionError(f"output '{output.name}' has shape {list(output.shape)}; a {head.task} head "
                                   f"is {what} with nc >= 1")
    if num_names is not None and num_names != count:
        raise ModelInspectionError(f"the metadata names {num_names} classes but the {head.task} head "
                                   f"'{output.name}' {list(output.shape)} carries {count}")
    return count


def require_detect(task: str, what: str) -> None:
    """Refuse a non-detection export where only boxes are measured (``what`` names the measurement)."""
    if task != "detect":
        raise ModelInspectionError(f"{what} measures detection boxes; this is an Ultralytics '{task}' export, whose "
                                   "served outputs are compared with Ultralytics' predict instead "
                                   "(tests/integration/test_task_heads.py)")
