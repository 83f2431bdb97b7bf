import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from generator.builder.precision.calibration import digest_batches, split_to_model_batch
from generator.builder.precision.errors import CalibrationError, PrecisionError
from generator.builder.precision.int8 import Int8Options, quantize_int8
from tests.generator.builder.precision.toy_detector import build_toy_detector, run


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
    assert zero_points
    for name in zero_points:
        zero = _initializer(model, name)
        assert zero.dtype in (np.int8, np.int32) and not np.any(zero), f"{name} is not symmetric"
    conv = next(n for n in model.graph.node if n.name == "c3/Conv")
    weight_inputs = dq[conv.input[1]]
    weights = _initializer(model, weight_inputs[0])
    assert weights.dtype == np.int8 and weights.min() >= -127
    assert _initializer(model, weight_inputs[1]).shape == (16,)  # one scale per output channel


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
