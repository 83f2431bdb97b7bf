"""Read what the generator needs from a YOLO-family ONNX: I/O, axes, head layout, Ultralytics metadata."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from generator.errors import ModelInspectionError
from generator.model.tasks import TASK_LAYOUTS, task_classes, task_head, task_of
from generator.model.tensors import TensorInfo

SUPPORTED_INPUT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)


@dataclass(frozen=True)
class DetectorInfo:
    """Everything the build needs to know about one detector ONNX."""

    path: Path
    input: TensorInfo
    output: TensorInfo
    layout: str  # "v8" | "v5" | "end2end", see generator.serving.nms
    num_classes: int
    class_names: tuple[str, ...]
    image_size: tuple[int, int]  # (height, width) the preprocess letterboxes to
    static_batch: int | None  # None when the batch axis is dynamic
    opset: int
    metadata: dict[str, str]
    task: str = "detect"  # Ultralytics' task (generator.model.tasks): detect, segment, pose, obb, classify
    protos: TensorInfo | None = None  # segment: the mask prototypes output
    kpt_shape: tuple[int, int] | None = None  # pose: (keypoints, values per keypoint)


def _tensor_info(value: onnx.ValueInfoProto) -> TensorInfo:
    tensor_type = value.type.tensor_type
    dims: list[int | str] = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        else:
            dims.append(d.dim_param or "?")
    return TensorInfo(value.name, tensor_type.elem_type, tuple(dims))


def _parse_literal(text: str | None) -> object:
    if text is None:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None


def _class_names(metadata: dict[str, str]) -> tuple[str, ...] | None:
    names = _parse_literal(metadata.get("names"))
    if isinstance(names, dict) and names and all(isinstance(k, int) for k in names):
        return tuple(str(names[i]) for i in sorted(names))
    if isinstance(names, list | tuple) and names:
        return tuple(str(n) for n in names)
    return None


def _image_size(metadata: dict[str, str], model_input: TensorInfo, override: tuple[int, int] | None) -> tuple[int, int]:
    height, width = model_input.shape[2], model_input.shape[3]
    if isinstance(height, int) and isinstance(width, int):
        if override is not None and override != (height, width):
            raise ModelInspectionError(
                f"--imgsz {override[0]}x{override[1]} does not match the model's fixed input {height}x{width}"
            )
        return height, width
    if override is not None:
        return override
    imgsz = _parse_literal(metadata.get("imgsz"))
    if isinstance(imgsz, list | tuple) and len(imgsz) == 2 and all(isinstance(v, int) for v in imgsz):
        return int(imgsz[0]), int(imgsz[1])
    if isinstance(imgsz, int):
        return imgsz, imgsz
    raise ModelInspectionError(
        f"input '{model_input.name}' has dynamic spatial axes and the ONNX has no 'imgsz' metadata; "
        "pass --imgsz HEIGHT WIDTH"
    )


def detect_layout(output: TensorInfo, num_classes: int | None, end2end: bool) -> tuple[str, int]:
    """Infer the head layout from the output shape and return (layout, num_classes)."""
    if len(output.shape) != 3:
        raise ModelInspectionError(
            f"output '{output.name}' has shape {list(output.shape)}; expected a 3-D detection head: "
            "[N, 4+nc, anchors] (YOLOv8/11), [N, anchors, 5+nc] (YOLOv5) or [N, K, 6] (end-to-end)"
        )
    d1, d2 = output.shape[1], output.shape[2]
    rows = d1 if isinstance(d1, int) else None
    cols = d2 if isinstance(d2, int) else None
    if cols == 6 and (end2end or (num_classes is not None and num_classes != 1) or (num_classes is None and rows is not None and rows <= 1000)):
        return "end2end", num_classes or 0
    if rows is not None and rows > 4 and (cols is None or rows < cols) and (num_classes in (None, rows - 4)):
        return "v8", rows - 4
    if cols is not None and cols > 5 and (rows is None or cols < rows) and (num_classes in (None, cols - 5)):
        return "v5", cols - 5
    expected = f" for {num_classes} classes" if num_classes is not None else ""
    raise ModelInspectionError(
        f"cannot recognise the detection head of output '{output.name}' with shape {list(output.shape)}{expected}; "
        "expected [N, 4+nc, anchors] (YOLOv8/11), [N, anchors, 5+nc] (YOLOv5) or [N, K, 6] (end-to-end); "
        "a segmentation, pose or OBB export is recognised by its Ultralytics 'task' metadata"
    )


def _resolve_output_dims(path: Path, model_input: TensorInfo, output: TensorInfo,
                         size: tuple[int, int]) -> TensorInfo:
    """Replace symbolic non-batch output dims by running the model once on a blank input.

    Exporters sometimes leave a head dim unnamed (``Transposeoutput0_dim_1``) that shape inference cannot
    resolve; the layout check needs it, and the size is fixed once the input size is.
    """
    if all(isinstance(d, int) for d in output.shape[1:]):
        return output
    import numpy as np
    import onnxruntime as ort

    from generator.serving.runner import usable_cores

    batch = model_input.shape[0] if isinstance(model_input.shape[0], int) else 1
    blank = np.zeros((batch, 3, *size), dtype=helper.tensor_dtype_to_np_dtype(model_input.elem_type))
    options = ort.SessionOptions()
    options.intra_op_num_threads = usable_cores()  # not 0: ONNX Runtime would pin threads outside taskset
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        (result,) = session.run([output.name], {model_input.name: blank})
    except Exception as exc:  # any runtime failure means the shape cannot be learnt
        raise ModelInspectionError(
            f"output '{output.name}' has symbolic dims {list(output.shape)} and the model does not run on a "
            f"blank {size[0]}x{size[1]} input to resolve them: {exc}"
        ) from exc
    return TensorInfo(output.name, output.elem_type, (output.shape[0], *result.shape[1:]))


def _refuse_engine(path: Path) -> None:
    """A TensorRT engine is not an ONNX; say what it is and what to do instead."""
    from generator.model.engine_header import read_ultralytics_header

    with path.open("rb") as handle:
        head = handle.read(1 << 20)
    header = read_ultralytics_header(head)
    if header is not None or path.suffix in (".engine", ".plan"):
        what = "an Ultralytics TensorRT .engine (JSON header + plan)" if header else "a TensorRT plan"
        raise ModelInspectionError(
            f"{path} is {what}, not an ONNX model. Plans only load on the TensorRT version and GPU they were "
            "built for, so export ONNX instead (yolo export format=onnx) and build the plan on the serving "
            "GPU with --target tensorrt"
        )


def inspect_onnx(path: Path, image_size: tuple[int, int] | None = None) -> DetectorInfo:
    """Load, check and describe a YOLO ONNX of any Ultralytics task; raise ``ModelInspectionError`` with a fix
    if unsupported. Which tasks a build serves is the builder's decision (``generator.builder.tasks``)."""
    if not path.is_file():
        raise ModelInspectionError(f"ONNX file not found: {path}")
    _refuse_engine(path)
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises several unrelated types for bad files
        raise ModelInspectionError(f"{path} is not a valid ONNX model: {exc}") from exc

    initializers = {i.name for i in model.graph.initializer}
    inputs = [_tensor_info(v) for v in model.graph.input if v.name not in initializers]
    outputs = [_tensor_info(v) for v in model.graph.output]
    if len(inputs) != 1:
        raise ModelInspectionError(f"expected one image input, found {len(inputs)}: {[i.name for i in inputs]}")
    (model_input,) = inputs
    if len(model_input.shape) != 4 or model_input.shape[1] != 3:
        raise ModelInspectionError(
            f"input '{model_input.name}' has shape {list(model_input.shape)}; expected NCHW with 3 channels"
        )
    if model_input.elem_type not in SUPPORTED_INPUT_TYPES:
        raise ModelInspectionError(f"input '{model_input.name}' must be float32 or float16")
    metadata = {p.key: p.value for p in model.metadata_props}
    size = _image_size(metadata, model_input, image_size)
    names = _class_names(metadata)
    task = task_of(metadata, outputs)
    head = task_head(task, metadata, outputs)
    for output in (head.output, head.protos):
        if output is not None and output.elem_type not in SUPPORTED_INPUT_TYPES:
            raise ModelInspectionError(f"output '{output.name}' must be float32 or float16")
    output = _resolve_output_dims(path, model_input, head.output, size)
    if task == "detect":
        end2end = str(metadata.get("end2end", "")).lower() == "true"
        layout, num_classes = detect_layout(output, len(names) if names else None, end2end)
    else:
        layout, num_classes = TASK_LAYOUTS[task], task_classes(dataclasses.replace(head, output=output),
                                                               len(names) if names else None)
    if names is None:
        names = tuple(f"class_{i}" for i in range(num_classes))
    batch = model_input.shape[0]
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return DetectorInfo(
        path=path,
        input=model_input,
        output=output,
        layout=layout,
        num_classes=len(names),
        class_names=names,
        image_size=size,
        static_batch=batch if isinstance(batch, int) else None,
        opset=opset,
        metadata=metadata,
        task=task,
        protos=head.protos,
        kpt_shape=head.kpt_shape,
    )
