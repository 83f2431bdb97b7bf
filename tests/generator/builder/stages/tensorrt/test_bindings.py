import pytest

from generator.builder.stages.tensorrt.bindings import (
    DetectorBindings,
    TensorDesc,
    TritonTensor,
    derive_detector_bindings,
    triton_data_type,
)
from generator.builder.stages.tensorrt.errors import BindingError


def _image_input(dtype="FLOAT", shape=(-1, 3, 640, 640), low=1, opt=8, high=16):
    return TensorDesc(
        "images", dtype, shape, True, ((low, 3, 640, 640), (opt, 3, 640, 640), (high, 3, 640, 640))
    )


def _output(shape=(-1, 84, 8400), dtype="FLOAT"):
    return TensorDesc("output0", dtype, shape, False)


def test_dynamic_batch_engine_gives_profile_max_as_max_batch_size():
    bindings = derive_detector_bindings([_image_input(), _output()])
    assert bindings == DetectorBindings(
        inputs=(TritonTensor("images", "TYPE_FP32", (3, 640, 640)),),
        outputs=(TritonTensor("output0", "TYPE_FP32", (84, 8400)),),
        max_batch_size=16,
    )


def test_fp16_io_and_pinned_dynamic_spatial_dims():
    spatial_dynamic = TensorDesc(
        "images", "HALF", (-1, 3, -1, -1), True, ((1, 3, 320, 320), (2, 3, 320, 320), (4, 3, 320, 320))
    )
    bindings = derive_detector_bindings([spatial_dynamic, _output((-1, 7, -1), "HALF")])
    assert bindings.inputs[0] == TritonTensor("images", "TYPE_FP16", (3, 320, 320))
    assert bindings.outputs[0].dims == (7, -1)
    assert bindings.max_batch_size == 4


def test_ranged_spatial_dims_stay_dynamic():
    ranged = TensorDesc(
        "images", "FLOAT", (-1, 3, -1, 640), True, ((1, 3, 320, 640), (1, 3, 640, 640), (2, 3, 1280, 640))
    )
    assert derive_detector_bindings([ranged, _output()]).inputs[0].dims == (3, -1, 640)


def test_static_batch_one_engine_is_served_with_max_batch_one():
    static = TensorDesc("images", "FLOAT", (1, 3, 640, 640), True, None)
    bindings = derive_detector_bindings([static, _output((1, 84, 8400))])
    assert bindings.max_batch_size == 1
    assert bindings.inputs[0].dims == (3, 640, 640)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ([TensorDesc("images", "FLOAT", (8, 3, 64, 64), True)], "fixed batch of 8"),
        ([_image_input(low=2)], "starts at batch 2"),
        ([TensorDesc("images", "FLOAT", (-1, 3, 64, 64), True, None)], "no optimization profile"),
        ([_image_input(dtype="FP8")], "FP8 has no Triton equivalent"),
    ],
)
def test_unservable_engines_are_rejected(tensors, message):
    with pytest.raises(BindingError, match=message):
        derive_detector_bindings([*tensors, _output()])


def test_outputs_must_agree_with_the_batch():
    with pytest.raises(BindingError, match="output 'output0' has batch 4"):
        derive_detector_bindings([_image_input(), _output((4, 84, 8400))])
    with pytest.raises(BindingError, match="at least one input and one output"):
        derive_detector_bindings([_image_input()])


def test_dtype_map_and_json_roundtrip():
    assert [triton_data_type(t) for t in ("FLOAT", "HALF", "INT32", "INT8", "BOOL")] == [
        "TYPE_FP32",
        "TYPE_FP16",
        "TYPE_INT32",
        "TYPE_INT8",
        "TYPE_BOOL",
    ]
    tensor = _image_input()
    assert TensorDesc.from_json(tensor.to_json()) == tensor
    assert TensorDesc.from_json(_output().to_json()) == _output()
