import pytest

from generator.builder.stages.tensorrt.availability import (
    MachineFacts,
    machine_facts,
    query_gpus,
    require_tensorrt_and_gpu,
    tensorrt_problem,
)
from generator.builder.stages.tensorrt.errors import TensorRTUnavailableError

TENSORRT_PROBLEM = tensorrt_problem()
GPUS, _, _, GPU_PROBLEM = query_gpus()


@pytest.mark.skipif(TENSORRT_PROBLEM is None, reason="TensorRT is importable here")
def test_missing_tensorrt_gives_an_actionable_error():
    with pytest.raises(TensorRTUnavailableError) as caught:
        require_tensorrt_and_gpu()
    message = str(caught.value)
    assert TENSORRT_PROBLEM in message
    assert "pip install tensorrt" in message and "pypi.nvidia.com" in message
    assert "NGC TensorRT container" in message and "nvcr.io/nvidia/tensorrt" in message
    assert "NVIDIA GPU and driver" in message
    assert "--target onnxruntime" in message
    if GPU_PROBLEM is not None:
        assert GPU_PROBLEM in message
    assert "\n" not in message


def test_stub_only_tensorrt_is_not_mistaken_for_tensorrt():
    import importlib.util

    spec = importlib.util.find_spec("tensorrt")
    if spec is not None and spec.origin is None:  # the tensorrt-stubs namespace folder
        assert TENSORRT_PROBLEM is not None and "stubs" in TENSORRT_PROBLEM


def test_machine_facts_agree_with_the_gpu_query():
    facts = machine_facts()
    assert isinstance(facts, MachineFacts)
    assert facts.gpus == GPUS
    assert (facts.gpu is None) == (not GPUS)
    if TENSORRT_PROBLEM is None:
        assert facts.tensorrt_version
