import pytest

from generator.builder.stages.tensorrt.availability import require_tensorrt_and_gpu
from generator.builder.stages.tensorrt.errors import TensorRTUnavailableError
from generator.repository.host import query_gpus, tensorrt_problem

TENSORRT_PROBLEM = tensorrt_problem()
GPUS, _, _, GPU_PROBLEM = query_gpus()


@pytest.mark.skipif(TENSORRT_PROBLEM is None, reason="TensorRT is importable here")
def test_missing_tensorrt_gives_an_actionable_error():
    with pytest.raises(TensorRTUnavailableError) as caught:
        require_tensorrt_and_gpu()
    message = str(caught.value)
    assert TENSORRT_PROBLEM is not None and TENSORRT_PROBLEM in message
    assert "pip install tensorrt" in message and "pypi.nvidia.com" in message
    assert "NGC TensorRT container" in message and "nvcr.io/nvidia/tensorrt" in message
    assert "NVIDIA GPU and driver" in message
    assert "--target onnxruntime" in message
    if GPU_PROBLEM is not None:
        assert GPU_PROBLEM in message
    assert "\n" not in message
