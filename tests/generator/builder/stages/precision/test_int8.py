import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from generator.builder.stages.precision.calibration import digest_batches, split_to_model_batch
from generator.builder.stages.precision.errors import CalibrationError, PrecisionError
from generator.builder.stages.precision.fp16 import fp32_node_names
from generator.builder.stages.precision.head import find_detection_head
from generator.builder.stages.precision.int8 import Int8Options, quantize_int8
from tests.generator.builder.stages.precision.toy_detector import build_toy_detector, run


def _quantize(model, batches, tmp_path, **kwargs):
    options = kwargs.pop("options", Int8Options())
    return quantize_int8(model, batches, options, cache_dir=tmp_path / "calib", progress=None, **kwargs)


def _initializer(model, name):
    return next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name)


def _dq_inputs(model):
    """Map a DequantizeLinear output to its (x, scale, zero_point) input names."""
    return {n.output[0]: list(n.input) for n in model.graph.node if n.op_type == "DequantizeLinear"}


@pytest.fixture(scope="module")
def quantized(toy_model, scene_batches, tmp_path_factory):
    return _quantize(toy_model, scene_batches, tmp_path_factory.mktemp("q"))


def test_qdq_is_symmetric_int8_with_per_channel_conv_weights(quantized):
    model = quantized.model
    onnx.checker.check_model(model, full_check=True)
    dq = _dq_inputs(model)
    assert dq, "no DequantizeLinear nodes"
    zero_points = [inputs[2] for inputs in dq.values() if len(inputs) > 2 and inputs[2]]
    assert len(zero_points) == len(dq)
    for name in zero_points:
        zero = _initializer(model, name)
        assert zero.dtype == np.int8 and not np.any(zero), f"{name} is not symmetric INT8"
    conv = next(n for n in model.graph.node if n.name == "c3/Conv")
    weight_inputs = dq[conv.input[1]]
    weights = _initializer(model, weight_inputs[0])
    assert weights.dtype == np.int8 and weights.min() >= -127
    assert _initializer(model, weight_inputs[1]).shape == (16,)  # one scale per output channel


def test_conv_biases_stay_float_and_only_conv_inputs_are_quantized(quantized):
    """TensorRT's parser takes only INT8/FP8/INT4 into DequantizeLinear (issue 10: no INT32 bias)."""
    model = quantized.model
    initializers = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in initializers:
            assert initializers[node.input[0]].data_type == onnx.TensorProto.INT8, node.name
        if node.op_type == "Conv" and len(node.input) > 2:
            assert node.input[2] in initializers, f"{node.name}: bias is computed, not a float initializer"
            assert initializers[node.input[2]].data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT)
    consumers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            if name in producers and producers[name].op_type == "DequantizeLinear":
                consumers.setdefault(name, set()).add(node.op_type)
    # A quantized tensor may also feed a Concat (the Q/DQ pair is shared), but every one feeds a Conv.
    assert consumers and all("Conv" in ops for ops in consumers.values()), consumers
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 19


def test_unquantized_body_is_fp16_and_head_tail_fp32(toy_model, quantized):
    fp32 = set(fp32_node_names(quantized.model))
    assert set(find_detection_head(toy_model).tail) <= fp32
    assert {"c1/Sigmoid", "c1/Mul", "cat/Concat"}.isdisjoint(fp32)
    scales = [i for i in quantized.model.graph.initializer if i.name.endswith("_scale")]
    assert scales and all(i.data_type == onnx.TensorProto.FLOAT16 for i in scales)


def test_fp32_float_layers_when_asked(toy_model, scene_batches, tmp_path):
    result = _quantize(toy_model, scene_batches[:2], tmp_path, options=Int8Options(float_dtype="fp32"))
    types = {i.data_type for i in result.model.graph.initializer}
    assert onnx.TensorProto.FLOAT16 not in types and result.float_dtype == "fp32"


def test_head_tail_is_not_quantized(quantized):
    model = quantized.model
    dq_outputs = set(_dq_inputs(model))
    by_name = {n.name: n for n in model.graph.node}
    for name in ("head/cls/Conv", "head/box/Conv", "head/dfl/Conv"):
        assert by_name[name].input[1] not in dq_outputs, f"{name} weight was quantized"
    assert "head/Sigmoid" in quantized.excluded_nodes and "head/Concat" in quantized.excluded_nodes
    sigmoid_in = by_name["head/Sigmoid"].input[0]
    assert sigmoid_in not in dq_outputs


def test_runs_on_onnxruntime_and_excluding_the_head_keeps_scores_closer(
    toy_model, scene_batches, quantized, tmp_path
):
    x = np.concatenate(scene_batches)
    ref = np.concatenate([run(toy_model, b) for b in scene_batches])
    out = np.concatenate([run(quantized.model, b) for b in scene_batches])
    assert out.dtype == np.float32 and out.shape == ref.shape == (x.shape[0], 7, 64)
    score_err = np.abs(out[:, 4:] - ref[:, 4:]).max()
    assert score_err < 0.05
    plain = _quantize(toy_model, scene_batches, tmp_path, options=Int8Options(exclude_head=False))
    plain_out = np.concatenate([run(plain.model, b) for b in scene_batches])
    assert np.abs(plain_out[:, 4:] - ref[:, 4:]).max() > score_err


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_methods_produce_runnable_models(toy_model, scene_batches, tmp_path, method):
    result = _quantize(toy_model, scene_batches[:4], tmp_path, options=Int8Options(method=method))
    assert result.method == method
    out = run(result.model, scene_batches[0])
    assert np.isfinite(out).all()


def test_rebuild_reuses_cached_ranges_without_reading_the_data(toy_model, scene_batches, tmp_path):
    first = _quantize(toy_model, scene_batches, tmp_path)
    assert not first.cache_hit and first.cache_path.is_file() and first.num_batches == len(scene_batches)
    assert first.calibration_digest == digest_batches(scene_batches)

    def must_not_be_read():
        raise AssertionError("calibration data was read on a cache hit")
        yield  # pragma: no cover

    again = _quantize(toy_model, must_not_be_read(), tmp_path, data_digest=first.calibration_digest)
    assert again.cache_hit and again.cache_key == first.cache_key and again.num_batches is None
    assert again.model.SerializeToString() == first.model.SerializeToString()


def test_cache_key_changes_with_method_data_and_model(toy_model, scene_batches, tmp_path):
    base = _quantize(toy_model, scene_batches[:2], tmp_path)
    other_method = _quantize(toy_model, scene_batches[:2], tmp_path, options=Int8Options(method="percentile"))
    other_data = _quantize(toy_model, scene_batches[2:4], tmp_path)
    other_model = _quantize(build_toy_detector(seed=1), scene_batches[:2], tmp_path)
    keys = {r.cache_key for r in (base, other_method, other_data, other_model)}
    assert len(keys) == 4
    assert not any(r.cache_hit for r in (other_method, other_data, other_model))


def test_changing_exclusions_reuses_the_calibration(toy_model, scene_batches, tmp_path):
    base = _quantize(toy_model, scene_batches[:2], tmp_path)
    more = _quantize(
        toy_model, scene_batches[:2], tmp_path, options=Int8Options(nodes_to_exclude=("c1/Conv",))
    )
    assert more.cache_hit and "c1/Conv" in more.excluded_nodes
    assert base.model.SerializeToString() != more.model.SerializeToString()


def test_corrupt_cache_is_reported(toy_model, scene_batches, tmp_path):
    first = _quantize(toy_model, scene_batches[:2], tmp_path)
    first.cache_path.write_text("{not json")
    with pytest.raises(CalibrationError, match="delete it"):
        _quantize(toy_model, scene_batches[:2], tmp_path)


def test_dynamic_batch_model_takes_whole_batches(scene_batches, tmp_path, monkeypatch):
    # Symbolic shape inference gives up on this graph and would leave a temp file in the cwd.
    monkeypatch.chdir(tmp_path)
    model = build_toy_detector(batch="N")
    batches = [np.concatenate(scene_batches[:3]), np.concatenate(scene_batches[3:6])]
    result = _quantize(model, batches, tmp_path)
    assert result.num_batches == 2
    assert run(result.model, batches[0]).shape == (3, 7, 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib"]


def test_user_errors(toy_model, scene_batches, tmp_path):
    with pytest.raises(PrecisionError, match="unknown calibration method"):
        Int8Options(method="kl")  # type: ignore[arg-type]
    with pytest.raises(PrecisionError, match="no/such"):
        _quantize(toy_model, scene_batches, tmp_path, options=Int8Options(nodes_to_exclude=("no/such",)))
    with pytest.raises(CalibrationError, match="no calibration images"):
        _quantize(toy_model, [], tmp_path)
    with pytest.raises(PrecisionError, match="minmax or entropy"):
        Int8Options(tool="modelopt", method="percentile")


def test_old_onnxruntime_is_refused_with_the_fix(toy_model, scene_batches, tmp_path, monkeypatch):
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "__version__", "1.24.4")
    with pytest.raises(PrecisionError, match=r"onnxruntime>=1\.32 \(found 1\.24\.4\).*pip install"):
        _quantize(toy_model, scene_batches, tmp_path)


def test_quantizer_leaves_nothing_in_the_working_directory(toy_model, scene_batches, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _quantize(toy_model, scene_batches[:2], tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib"]


def test_split_to_model_batch():
    batch = np.zeros((3, 3, 32, 32), np.float32)
    assert [a.shape[0] for a in split_to_model_batch([batch], 1)] == [1, 1, 1]
    assert [a.shape[0] for a in split_to_model_batch([batch], None)] == [3]
    with pytest.raises(CalibrationError, match="exactly 2"):
        split_to_model_batch([batch], 2)
    with pytest.raises(CalibrationError, match="float32"):
        split_to_model_batch([batch.astype(np.float64)], 1)
    with pytest.raises(CalibrationError, match="N x C x H x W"):
        split_to_model_batch([batch[0]], 1)
