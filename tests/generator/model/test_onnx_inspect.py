"""inspect_onnx on small real graphs: head layouts, Ultralytics metadata, and clear refusals."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto

from generator.errors import ModelInspectionError
from generator.model.onnx_inspect import TensorInfo, detect_layout, inspect_onnx
from tests.fixtures.onnx_factory import (
    STRIDE,
    make_bad_rank_model,
    make_detector,
    make_int_input_model,
    make_seg_model,
    save,
    ultralytics_metadata,
)


def write(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    return save(model, tmp_path / name)


@pytest.mark.parametrize(("head", "layout", "shape"), [
    ("v8", "v8", ("batch", 6, 64)),
    ("v5", "v5", ("batch", 64, 7)),
    ("end2end", "end2end", ("batch", 64, 6)),
])
def test_each_head_with_ultralytics_metadata(tmp_path: Path, head: str, layout: str, shape: tuple) -> None:
    info = inspect_onnx(write(tmp_path, make_detector(head, metadata=ultralytics_metadata())))
    assert info.layout == layout
    assert info.num_classes == 2 and info.class_names == ("a", "b")
    assert info.image_size == (64, 64)
    assert info.static_batch is None
    assert info.input == TensorInfo("images", TensorProto.FLOAT, ("batch", 3, 64, 64))
    assert info.output.shape == shape
    assert info.opset == 17
    assert info.metadata["stride"] == "32" and info.metadata["task"] == "detect"
    assert info.input.triton_dtype == "TYPE_FP32" and info.input.numpy_dtype == "float32"


@pytest.mark.parametrize("batch", [1, 4])
def test_static_batch(tmp_path: Path, batch: int) -> None:
    info = inspect_onnx(write(tmp_path, make_detector(batch=batch)))
    assert info.static_batch == batch


def test_without_metadata_class_names_are_generated(tmp_path: Path) -> None:
    info = inspect_onnx(write(tmp_path, make_detector("v8", num_classes=3)))
    assert info.layout == "v8" and info.class_names == ("class_0", "class_1", "class_2")
    assert info.metadata == {}


def test_names_as_a_list_and_imgsz_as_an_int(tmp_path: Path) -> None:
    meta = {"names": "['cat', 'dog']", "imgsz": "96"}
    info = inspect_onnx(write(tmp_path, make_detector(size=("height", "width"), metadata=meta)))
    assert info.class_names == ("cat", "dog") and info.image_size == (96, 96)


def test_names_dict_is_ordered_by_class_id(tmp_path: Path) -> None:
    meta = {"names": "{1: 'second', 0: 'first', 2: \"it's\"}"}
    info = inspect_onnx(write(tmp_path, make_detector(num_classes=3, metadata=meta)))
    assert info.class_names == ("first", "second", "it's")


def test_unparsable_names_fall_back_to_generated_ones(tmp_path: Path) -> None:
    info = inspect_onnx(write(tmp_path, make_detector(metadata={"names": "not python {"})))
    assert info.class_names == ("class_0", "class_1")


def test_names_that_disagree_with_the_head_are_refused(tmp_path: Path) -> None:
    meta = ultralytics_metadata(names=tuple("abcde"))
    with pytest.raises(ModelInspectionError, match=r"cannot recognise the detection head .* for 5 classes"):
        inspect_onnx(write(tmp_path, make_detector("v8", num_classes=2, metadata=meta)))


def test_dynamic_spatial_axes_use_imgsz_metadata(tmp_path: Path) -> None:
    model = make_detector(size=("height", "width"), metadata=ultralytics_metadata(imgsz=(96, 160)))
    info = inspect_onnx(write(tmp_path, model))
    assert info.image_size == (96, 160)
    assert info.input.shape == ("batch", 3, "height", "width")
    # The anchor count follows the chosen input size: resolved by running the model at 96x160.
    assert info.output.shape[2] == (96 // STRIDE) * (160 // STRIDE)


def test_dynamic_spatial_axes_without_imgsz_need_the_flag(tmp_path: Path) -> None:
    path = write(tmp_path, make_detector(size=("height", "width"), metadata=ultralytics_metadata(imgsz=None)))
    with pytest.raises(ModelInspectionError, match=r"dynamic spatial axes .* pass --imgsz HEIGHT WIDTH"):
        inspect_onnx(path)
    assert inspect_onnx(path, image_size=(128, 96)).image_size == (128, 96)


def test_imgsz_override_wins_over_metadata_for_dynamic_axes(tmp_path: Path) -> None:
    model = make_detector(size=("height", "width"), metadata=ultralytics_metadata(imgsz=(64, 64)))
    assert inspect_onnx(write(tmp_path, model), image_size=(320, 256)).image_size == (320, 256)


def test_imgsz_override_must_match_a_fixed_input(tmp_path: Path) -> None:
    path = write(tmp_path, make_detector())
    assert inspect_onnx(path, image_size=(64, 64)).image_size == (64, 64)
    with pytest.raises(ModelInspectionError, match="--imgsz 640x640 does not match the model's fixed input 64x64"):
        inspect_onnx(path, image_size=(640, 640))


def test_two_outputs_whose_head_leaves_no_classes_are_refused(tmp_path: Path) -> None:
    """Two outputs, one 4-D, read as a segmentation export; a head too small for its 6 coefficients is named."""
    with pytest.raises(ModelInspectionError, match=r"output 'output0' has shape \[1, 6, 64\]; a segment head is "
                       r"\[N, 4\+nc\+6, anchors\] with nc >= 1"):
        inspect_onnx(write(tmp_path, make_seg_model()))


def test_a_2d_output_reads_as_a_classifier(tmp_path: Path) -> None:
    info = inspect_onnx(write(tmp_path, make_bad_rank_model()))
    assert (info.task, info.layout, info.num_classes) == ("classify", "classify", 384)


def test_segment_task_with_one_output_is_refused(tmp_path: Path) -> None:
    model = make_detector(metadata=ultralytics_metadata(task="segment"))
    with pytest.raises(ModelInspectionError, match=r"a segmentation export has two outputs, .*; this one has "
                       r"\['output0'\]"):
        inspect_onnx(write(tmp_path, model))


def test_an_unknown_task_is_refused_naming_the_served_ones(tmp_path: Path) -> None:
    model = make_detector(metadata=ultralytics_metadata(task="depth"))
    with pytest.raises(ModelInspectionError, match="task 'depth'; the ensemble serves the Ultralytics tasks "
                       "detect, segment, pose, obb, classify"):
        inspect_onnx(write(tmp_path, model))


def test_pose_without_kpt_shape_is_refused(tmp_path: Path) -> None:
    model = make_detector(num_classes=5, metadata=ultralytics_metadata(names=("person",), task="pose"))
    with pytest.raises(ModelInspectionError, match="a pose export needs the 'kpt_shape' metadata"):
        inspect_onnx(write(tmp_path, model))


def test_pose_head_is_split_by_kpt_shape_and_checked_against_the_names(tmp_path: Path) -> None:
    # 4 box rows + 1 class + 2 keypoints x 2 values: a 9-row head (the factory's "v8" head of 5 classes).
    meta = ultralytics_metadata(names=("person",), task="pose", kpt_shape="[2, 2]")
    info = inspect_onnx(write(tmp_path, make_detector(num_classes=5, metadata=meta)))
    assert (info.task, info.layout, info.num_classes, info.kpt_shape) == ("pose", "pose", 1, (2, 2))
    meta = ultralytics_metadata(names=("a", "b"), task="pose", kpt_shape="[2, 2]")
    with pytest.raises(ModelInspectionError, match=r"the metadata names 2 classes but the pose head 'output0' "
                       r"\['batch', 9, 64\] carries 1"):
        inspect_onnx(write(tmp_path, make_detector(num_classes=5, metadata=meta), "two.onnx"))


def test_integer_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelInspectionError, match="input 'images' must be float32 or float16"):
        inspect_onnx(write(tmp_path, make_int_input_model()))


def test_float16_input_is_accepted(tmp_path: Path) -> None:
    info = inspect_onnx(write(tmp_path, make_detector(input_dtype=TensorProto.FLOAT16)))
    assert info.input.triton_dtype == "TYPE_FP16"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelInspectionError, match="ONNX file not found"):
        inspect_onnx(tmp_path / "nope.onnx")


def test_not_an_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "fake.onnx"
    path.write_bytes(b"\x89PNG\r\n\x1a\n this is not a protobuf at all \xff\xfe")
    with pytest.raises(ModelInspectionError, match="is not a valid ONNX model"):
        inspect_onnx(path)
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(ModelInspectionError, match="not found"):
        inspect_onnx(tmp_path / "dir.onnx")


def test_a_tensorrt_plan_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "yolo.engine"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelInspectionError, match=r"not an ONNX model.*export ONNX instead"):
        inspect_onnx(path)


def test_nhwc_input_is_refused(tmp_path: Path) -> None:
    model = make_detector()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[1].dim_value, dims[3].dim_value = 64, 3
    path = tmp_path / "nhwc.onnx"
    path.write_bytes(model.SerializeToString())  # onnx.checker would accept it; the shapes are what matter
    with pytest.raises(ModelInspectionError, match=r"shape \[.batch., 64, 64, 3\]; expected NCHW with 3 channels"):
        inspect_onnx(path)


# --- detect_layout on shapes alone, including the ambiguous ones --------------------------------------


def out(*shape: int | str) -> TensorInfo:
    return TensorInfo("output0", TensorProto.FLOAT, shape)


@pytest.mark.parametrize(("shape", "num_classes", "end2end", "expected"), [
    ((1, 84, 8400), None, False, ("v8", 80)),
    ((1, 84, 8400), 80, False, ("v8", 80)),
    ((1, 5, 8400), None, False, ("v8", 1)),
    ((1, 6, 8400), 2, False, ("v8", 2)),  # 6 rows but anchors follow: not end-to-end
    ((1, 84, "anchors"), None, False, ("v8", 80)),
    ((1, 25200, 85), None, False, ("v5", 80)),
    ((1, "anchors", 85), None, False, ("v5", 80)),
    ((1, 25200, 6), None, False, ("v5", 1)),  # many rows of 6: a one-class YOLOv5
    ((1, 25200, 6), 1, False, ("v5", 1)),
    ((1, 300, 6), None, False, ("end2end", 0)),  # few rows of 6: end-to-end
    ((1, 300, 6), 80, False, ("end2end", 80)),  # 80 names cannot be a 1-class v5
    ((1, 300, 6), 1, True, ("end2end", 1)),  # the end2end flag settles a one-class model
    ((1, 300, 6), 1, False, ("v5", 1)),  # ...and without it a one-class model reads as v5
    (("n", "k", 6), None, True, ("end2end", 0)),
])
def test_detect_layout(shape: tuple, num_classes: int | None, end2end: bool, expected: tuple[str, int]) -> None:
    assert detect_layout(out(*shape), num_classes, end2end) == expected


@pytest.mark.parametrize(("shape", "num_classes"), [
    ((1, 4, 8400), None),  # no class rows
    ((1, 8400, 5), None),  # no class columns
    ((1, 84, 8400), 3),  # names disagree with both readings
    ((1, 8400, 8400), None),  # square: no way to tell rows from anchors
    ((1, "a", "b"), None),
    ((1, 32, 8400, 1), None),
])
def test_unrecognisable_heads_are_refused(shape: tuple, num_classes: int | None) -> None:
    with pytest.raises(ModelInspectionError, match="output 'output0'"):
        detect_layout(out(*shape), num_classes, False)


def test_end2end_metadata_flag_is_read_from_the_onnx(tmp_path: Path) -> None:
    meta = ultralytics_metadata(names=("only",), end2end="True")
    # A one-class end-to-end head is [N, K, 6]; so is a one-class v5 head. The flag decides.
    model = make_detector("end2end", num_classes=1, metadata=meta)
    assert inspect_onnx(write(tmp_path, model)).layout == "end2end"
    meta.pop("end2end")
    model = make_detector("end2end", num_classes=1, metadata=meta)
    assert inspect_onnx(write(tmp_path, model, "plain.onnx")).layout == "v5"


def test_symbolic_head_dims_are_resolved_by_running_the_model(tmp_path: Path) -> None:
    # Exporters sometimes leave the class axis unnamed; the layout must still be recognised.
    model = make_detector("v8", metadata=ultralytics_metadata())
    dim = model.graph.output[0].type.tensor_type.shape.dim[1]
    dim.Clear()
    dim.dim_param = "Transposeoutput0_dim_1"
    info = inspect_onnx(write(tmp_path, model))
    assert info.layout == "v8" and info.num_classes == 2
    assert info.output.shape == ("batch", 6, (64 // STRIDE) ** 2)
