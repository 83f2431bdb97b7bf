"""The CUDA provider's settings and GPU input batches, without a GPU: NumPy stands in for CuPy.

What needs the GPU itself (the provider, DLPack tensors from the GPU preprocess) ran on the lent H200:
docs/results/gpu/README.md, "GPU detector".
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from generator.serving.cuda_provider import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    SETTINGS,
    CudaSettings,
    CudaSettingsError,
    c_strides,
    device_pointer,
    session_providers,
    stack_tensors,
)
from tests.generator.serving.helpers import DeviceArray


def test_the_chosen_settings_by_onnx_runtime_names_and_as_triton_legacy_codes() -> None:
    assert SETTINGS.parameters() == {"cudnn_conv_algo_search": "HEURISTIC", "arena_extend_strategy": "kSameAsRequested"}
    # onnxruntime_backend: 0 EXHAUSTIVE, 1 HEURISTIC, 2 DEFAULT; 0 kNextPowerOfTwo, 1 kSameAsRequested
    assert SETTINGS.legacy_parameters() == {"cudnn_conv_algo_search": "1", "arena_extend_strategy": "1"}
    limited = CudaSettings(gpu_mem_limit=1 << 30)
    assert limited.parameters()["gpu_mem_limit"] == limited.legacy_parameters()["gpu_mem_limit"] == str(1 << 30)


def test_provider_options_name_the_instance_gpu() -> None:
    (cuda, options), cpu = session_providers(CudaSettings(device_id=3))
    assert (cuda, cpu) == (CUDA_PROVIDER, CPU_PROVIDER)
    assert options == {"device_id": "3", "cudnn_conv_algo_search": "HEURISTIC",
                       "arena_extend_strategy": "kSameAsRequested"}
    assert session_providers(None) == [CPU_PROVIDER]


def test_settings_round_trip_through_config_parameters() -> None:
    settings = CudaSettings(1, "EXHAUSTIVE", "kNextPowerOfTwo", 123)
    assert CudaSettings.from_parameters({**settings.parameters(), "onnx_file": "model.onnx"}, 1) == settings
    assert CudaSettings.from_parameters({}, 2) == CudaSettings(device_id=2)


@pytest.mark.parametrize(("parameters", "message"), [
    ({"cudnn_conv_algo_search": "FAST"}, "cudnn_conv_algo_search must be one of EXHAUSTIVE, HEURISTIC, DEFAULT"),
    ({"arena_extend_strategy": "1"}, "arena_extend_strategy must be one of kNextPowerOfTwo, kSameAsRequested"),
    ({"gpu_mem_limit": "4 GiB"}, "gpu_mem_limit must be a number of bytes, not '4 GiB'"),
])
def test_bad_settings_name_the_parameter(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(CudaSettingsError, match=message):
        CudaSettings.from_parameters(parameters, 0)


def test_device_pointer_reads_the_cuda_array_interface() -> None:
    array = np.zeros((2, 4, 4, 3), np.uint8)
    assert device_pointer(DeviceArray(array)) == array.ctypes.data
    assert device_pointer(array) is None  # host memory
    with pytest.raises(ValueError, match="C-contiguous"):
        device_pointer(DeviceArray(array[:, ::2]))


def test_c_strides() -> None:
    assert c_strides((2, 3, 4), 4) == np.zeros((2, 3, 4), np.float32).strides


class Tensor:
    """``pb_utils.Tensor`` as the detector sees it: in host or GPU memory."""

    def __init__(self, array: np.ndarray, on_gpu: bool, device: int = 0) -> None:
        self.array, self.on_gpu, self.device = array, on_gpu, device

    def is_cpu(self) -> bool:
        return not self.on_gpu

    def as_numpy(self) -> np.ndarray:
        assert not self.on_gpu, "as_numpy on a GPU tensor"
        return self.array


class FakeCupy:
    """The CuPy calls ``stack_tensors`` makes, on NumPy, recording what was copied."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cuda = SimpleNamespace(Device=lambda _id: nullcontext(),
                                    get_current_stream=lambda: SimpleNamespace(synchronize=self._sync))

    def _sync(self) -> None:
        self.calls.append("synchronize")

    def from_dlpack(self, tensor: Tensor) -> DeviceArray:
        self.calls.append("from_dlpack")
        return DeviceArray(tensor.array, tensor.device)

    def asarray(self, array: np.ndarray) -> DeviceArray:
        self.calls.append("asarray")
        return DeviceArray(array)

    def concatenate(self, arrays: list[DeviceArray]) -> DeviceArray:
        self.calls.append("concatenate")
        self.devices = [a.device.id for a in arrays]
        return DeviceArray(np.concatenate([a.array for a in arrays]))

    def ascontiguousarray(self, array: DeviceArray) -> DeviceArray:
        return array


def images(count: int, value: int) -> np.ndarray:
    return np.full((count, 2, 2, 3), value, np.uint8)


def test_a_lone_host_tensor_stays_on_the_host_and_never_touches_cupy() -> None:
    def no_cupy() -> Any:
        raise AssertionError("CuPy imported for a lone host tensor")

    tensor = Tensor(images(2, 7), False)
    batch, sizes = stack_tensors([tensor], 0, no_cupy)
    assert batch is tensor.array and sizes == [2]


def test_several_host_tensors_are_copied_to_the_gpu_and_joined_there() -> None:
    cupy = FakeCupy()
    batch, sizes = stack_tensors([Tensor(images(1, 1), False), Tensor(images(2, 2), False)], 0, lambda: cupy)
    assert sizes == [1, 2] and isinstance(batch, DeviceArray)
    np.testing.assert_array_equal(batch.array[:, 0, 0, 0], [1, 2, 2])
    assert cupy.calls == ["asarray", "asarray", "concatenate", "synchronize"]  # no host-side join


def test_without_cupy_several_host_tensors_are_joined_on_the_host() -> None:
    def missing() -> Any:
        raise RuntimeError("the detector got its input in GPU memory and needs CuPy")

    batch, sizes = stack_tensors([Tensor(images(1, 1), False), Tensor(images(2, 2), False)], 0, missing)
    assert isinstance(batch, np.ndarray) and sizes == [1, 2]
    np.testing.assert_array_equal(batch[:, 0, 0, 0], [1, 2, 2])


def test_a_lone_gpu_tensor_is_read_in_place() -> None:
    cupy = FakeCupy()
    tensor = Tensor(images(3, 5), True)
    batch, sizes = stack_tensors([tensor], 0, lambda: cupy)
    assert sizes == [3] and device_pointer(batch) == tensor.array.ctypes.data  # the very same memory
    assert cupy.calls == ["from_dlpack", "synchronize"]


def test_several_gpu_tensors_are_concatenated_on_the_gpu_in_request_order() -> None:
    cupy = FakeCupy()
    tensors = [Tensor(images(2, 1), True), Tensor(images(1, 2), False), Tensor(images(1, 3), True, device=1)]
    batch, sizes = stack_tensors(tensors, 0, lambda: cupy)
    assert sizes == [2, 1, 1]
    np.testing.assert_array_equal(batch.array[:, 0, 0, 0], [1, 1, 2, 3])
    # A host tensor among GPU ones is uploaded; one on another GPU is copied to this instance's GPU first.
    assert cupy.calls == ["from_dlpack", "asarray", "from_dlpack", "concatenate", "synchronize"]
    assert cupy.devices == [0, 0, -1]  # -1: DeviceArray.copy(), "to the current device"
