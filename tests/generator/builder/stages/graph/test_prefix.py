"""The normalisation prefix: uint8 BGR NHWC into the wrapped graph == the original on to_float_nchw."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from generator.builder.stages.graph.prefix import SERVED_INPUT, add_normalisation_prefix
from generator.serving.batch import to_float_nchw
from tests.fixtures.onnx_factory import make_detector


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def bgr_batch(n: int, height: int = 64, width: int = 64) -> np.ndarray:
    return np.random.default_rng(n).integers(0, 256, (n, height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(("dtype", "np_dtype"), [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
def test_wrapped_model_equals_original_on_normalised_input(dtype: int, np_dtype: type) -> None:
    original = make_detector("v8", input_dtype=dtype, seed=3)
    wrapped = add_normalisation_prefix(original)
    images = bgr_batch(3)
    (expected,) = session(original).run(None, {"images": to_float_nchw(images, np_dtype)})
    (got,) = session(wrapped).run(None, {SERVED_INPUT: images})
    np.testing.assert_array_equal(got, expected)
    # The channel order matters: feeding RGB instead of BGR must change the result.
    (swapped,) = session(wrapped).run(None, {SERVED_INPUT: images[..., ::-1].copy()})
    assert not np.array_equal(swapped, expected)


def test_served_input_signature_and_original_untouched() -> None:
    original = make_detector(batch="batch", size=("height", "width"))
    before = original.SerializeToString()
    wrapped = add_normalisation_prefix(original)
    assert original.SerializeToString() == before
    (served,) = wrapped.graph.input
    assert served.name == SERVED_INPUT and served.type.tensor_type.elem_type == TensorProto.UINT8
    dims = [d.dim_param or d.dim_value for d in served.type.tensor_type.shape.dim]
    assert dims == ["batch", "height", "width", 3]
    assert [o.name for o in wrapped.graph.output] == ["output0"]
    assert wrapped.metadata_props == original.metadata_props


def test_static_batch_and_non_square_input() -> None:
    original = make_detector("v5", batch=2, size=(32, 96), seed=4)
    wrapped = add_normalisation_prefix(original)
    dims = [d.dim_value for d in wrapped.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 32, 96, 3]
    images = bgr_batch(2, 32, 96)
    (expected,) = session(original).run(None, {"images": to_float_nchw(images)})
    (got,) = session(wrapped).run(None, {SERVED_INPUT: images})
    np.testing.assert_array_equal(got, expected)
