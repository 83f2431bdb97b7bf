"""OnnxRunner: static-batch exports run any number of images (chunk + pad) like a dynamic one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from generator.serving.runner import OnnxRunner
from tests.fixtures.onnx_factory import make_detector, save


@pytest.fixture(scope="module")
def dynamic_runner(tmp_path_factory: pytest.TempPathFactory) -> OnnxRunner:
    path = save(make_detector("v8", batch="batch", seed=5), tmp_path_factory.mktemp("runner") / "dyn.onnx")
    return OnnxRunner(str(path), intra_op_threads=1)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (7, 3, 64, 64)).astype(np.float32)


def test_dynamic_model_reports_no_static_batch(dynamic_runner: OnnxRunner) -> None:
    assert dynamic_runner.static_batch is None
    assert dynamic_runner.input_name == "images" and dynamic_runner.output_names == ["output0"]


@pytest.mark.parametrize("static", [1, 3])
def test_static_batch_model_equals_per_image_runs(tmp_path: Path, dynamic_runner: OnnxRunner, images: np.ndarray,
                                                  static: int) -> None:
    # Same seed, same weights: only the batch axis differs from the dynamic twin.
    runner = OnnxRunner(str(save(make_detector("v8", batch=static, seed=5), tmp_path / "static.onnx")),
                        intra_op_threads=1)
    assert runner.static_batch == static
    per_image = np.concatenate([dynamic_runner.run(images[i : i + 1])[0] for i in range(len(images))])
    for count in range(1, len(images) + 1):
        (out,) = runner.run(images[:count])
        assert out.shape == (count, 6, 64)
        np.testing.assert_allclose(out, per_image[:count], rtol=1e-5, atol=1e-5)


def test_images_are_not_mixed_up_between_chunks(tmp_path: Path, images: np.ndarray) -> None:
    runner = OnnxRunner(str(save(make_detector("v8", batch=3, seed=5), tmp_path / "static.onnx")),
                        intra_op_threads=1)
    (forward,) = runner.run(images)
    (backward,) = runner.run(images[::-1].copy())
    np.testing.assert_allclose(forward, backward[::-1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(forward[0], forward[1])


def test_session_threads_share_the_host_between_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from generator.serving.runner import session_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    assert session_threads(0, 2) == 8  # 16 cores, two detector instances
    assert session_threads(0, 3) == 5
    assert session_threads(0, 64) == 1  # never zero: ONNX Runtime would read 0 as "every core"
    assert session_threads(4, 2) == 4  # an explicit --detector-threads wins
    assert session_threads(-1, 2) == 16  # the default two CPU instances: every core each


def test_a_steps_threads_count_every_instance_group_of_its_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from generator.serving.runner import step_session_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    groups = {"instance_group": [{"count": 1, "kind": "KIND_CPU"}, {"count": 3, "kind": "KIND_CPU"}]}
    assert step_session_threads(groups, {"intra_op_threads": "0"}) == 4  # 16 cores over 4 instances
    assert step_session_threads({}, {"intra_op_threads": "0"}) == 16  # no group: one instance
    assert step_session_threads(groups, {"intra_op_threads": "2"}) == 2


def test_chunks_cover_the_batch_in_static_steps() -> None:
    from generator.serving.runner import chunks

    assert chunks(7, None) == [(0, 7)]
    assert chunks(7, 7) == [(0, 7)]
    assert chunks(7, 3) == [(0, 3), (3, 6), (6, 7)]
    assert chunks(2, 4) == [(0, 2)]  # padded to 4 by the runner


def test_asking_for_cuda_without_it_fails_loudly(tmp_path: Path) -> None:
    """The CPU onnxruntime here has no CUDA provider: ONNX Runtime would quietly run on the CPU instead."""
    from generator.serving.cuda_provider import CudaSettings
    from generator.serving.runner import CudaProviderError

    path = save(make_detector("v8", batch="batch", seed=5), tmp_path / "dyn.onnx")
    with pytest.raises(CudaProviderError, match=r"could not create the CUDA provider on GPU 0 .*onnxruntime-gpu"):
        OnnxRunner(str(path), intra_op_threads=1, cuda=CudaSettings())


class Binding:
    """ONNX Runtime's IOBinding as the CUDA path uses it, recording each call; outputs sized like the input."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.size = 0

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.calls.append(("cpu_input", name, array.shape))
        self.size = len(array)

    def bind_input(self, name: str, device: str, device_id: int, dtype: type, shape: list[int], pointer: int) -> None:
        self.calls.append(("input", name, device, device_id, dtype, tuple(shape), pointer))
        self.size = shape[0]

    def bind_output(self, name: str, device: str, device_id: int) -> None:
        self.calls.append(("output", name, device, device_id))

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [np.zeros((self.size, 6, 64), np.float32)]


def bound_runner(tmp_path: Path, static: int | str) -> tuple[OnnxRunner, list[Binding]]:
    """A runner whose session is replaced by one that records the I/O binding of every run."""
    from generator.serving.cuda_provider import CudaSettings

    runner = OnnxRunner(str(save(make_detector("v8", batch=static, seed=5), tmp_path / "m.onnx")), intra_op_threads=1)
    bindings: list[Binding] = []

    class Session:
        def io_binding(self) -> Binding:
            bindings.append(Binding())
            return bindings[-1]

        def run_with_iobinding(self, binding: Binding) -> None:
            binding.calls.append(("run",))

    runner._session = Session()
    runner.cuda = CudaSettings(device_id=2)
    runner.wait_for_producer = lambda: None  # NumPy stand-ins for GPU arrays: no CuPy stream to wait for
    return runner, bindings


def test_cuda_runs_bind_host_batches_once_and_outputs_on_the_instance_gpu(tmp_path: Path) -> None:
    runner, bindings = bound_runner(tmp_path, "batch")
    (out,) = runner.run(np.zeros((1, 3, 64, 64), np.float32))
    assert out.shape == (1, 6, 64)
    assert bindings[0].calls == [("cpu_input", "images", (1, 3, 64, 64)), ("output", "output0", "cuda", 2), ("run",)]


def test_cuda_runs_bind_a_gpu_batch_where_it_lies(tmp_path: Path) -> None:
    from tests.generator.serving.helpers import DeviceArray

    runner, bindings = bound_runner(tmp_path, "batch")
    batch = np.zeros((1, 3, 64, 64), np.float32)
    runner.run(DeviceArray(batch))
    assert bindings[0].calls[0] == ("input", "images", "cuda", 2, np.float32, (1, 3, 64, 64), batch.ctypes.data)


def test_a_gpu_batch_is_finished_on_cupys_stream_before_the_session_reads_it(tmp_path: Path) -> None:
    """ONNX Runtime's stream does not wait for CuPy's: every bound GPU batch waits for its producer first."""
    from tests.generator.serving.helpers import DeviceArray

    runner, bindings = bound_runner(tmp_path, "batch")
    waits: list[int] = []
    runner.wait_for_producer = lambda: waits.append(len(bindings[-1].calls) if bindings else -1)
    runner.run(DeviceArray(np.zeros((2, 3, 64, 64), np.float32)))
    assert waits == [0]  # before the input is bound and the session runs
    runner.run(np.zeros((1, 3, 64, 64), np.float32))
    assert waits == [0]  # a host batch: ONNX Runtime copies it itself


def test_static_batches_run_in_chunks_of_the_static_size(tmp_path: Path) -> None:
    runner, bindings = bound_runner(tmp_path, 1)
    (out,) = runner.run(np.zeros((3, 3, 64, 64), np.float32))
    assert out.shape == (3, 6, 64) and len(bindings) == 3
    assert {b.calls[0][2] for b in bindings} == {(1, 3, 64, 64)}


def test_warm_up_runs_each_size_once_or_the_static_size(tmp_path: Path) -> None:
    runner, bindings = bound_runner(tmp_path, 1)
    assert runner.warm_up((1, 8)) == [1]
    assert len(bindings) == 1  # batch 8 on a batch-1 export is eight batch-1 runs: the same shape
    dynamic = OnnxRunner(str(save(make_detector("v8", batch="batch", seed=5), tmp_path / "d.onnx")),
                         intra_op_threads=1)
    assert dynamic.warm_up((1, 4, 4)) == [1, 4]


def test_batch_buckets_are_powers_of_two_up_to_the_largest_batch() -> None:
    from generator.serving.runner import batch_buckets

    assert batch_buckets(32) == (1, 2, 4, 8, 16, 32)
    assert batch_buckets(8) == (1, 2, 4, 8)
    assert batch_buckets(12) == (1, 2, 4, 8, 12)
    assert batch_buckets(1) == (1,)


def test_bucket_chunks_pad_each_run_to_the_smallest_bucket_holding_it() -> None:
    from generator.serving.runner import bucket_chunks

    buckets = (1, 2, 4, 8)
    assert bucket_chunks(1, buckets) == [(0, 1, 1)]
    assert bucket_chunks(3, buckets) == [(0, 3, 4)]
    assert bucket_chunks(8, buckets) == [(0, 8, 8)]
    assert bucket_chunks(11, buckets) == [(0, 8, 8), (8, 11, 4)]  # more than the largest: cut, then bucket the rest


def test_gpu_batches_run_on_the_session_of_their_bucket_only(tmp_path: Path) -> None:
    """Each session sees one shape for good: the CUDA provider pays for every new batch size (GPU proof)."""
    runner, bindings = bound_runner(tmp_path, "batch")
    seen: dict[int, list[int]] = {}

    def session_for(bucket: int):
        class Session:
            def io_binding(self) -> Binding:
                bindings.append(Binding())
                return bindings[-1]

            def run_with_iobinding(self, binding: Binding) -> None:
                seen.setdefault(bucket, []).append(binding.size)
        return Session()

    runner._buckets = {size: session_for(size) for size in (1, 2, 4)}
    images = np.random.default_rng(1).uniform(0, 1, (7, 3, 64, 64)).astype(np.float32)
    for count in (1, 3, 2, 7, 4):
        (out,) = runner.run(images[:count])
        assert out.shape == (count, 6, 64)
    assert seen == {1: [1], 4: [4, 4, 4, 4], 2: [2]}  # 3 -> 4, 7 -> 4 + (3 -> 4), 4
    assert runner.warm_up() == [1, 2, 4]


def test_warm_up_takes_the_image_size_when_the_export_leaves_it_open(tmp_path: Path) -> None:
    runner, bindings = bound_runner(tmp_path, "batch")
    runner.input_shape = ["batch", 3, "height", "width"]
    assert runner.warm_up((1,)) == []
    assert runner.warm_up((1,), (3, 64, 64)) == [1] and bindings[-1].calls[0][2] == (1, 3, 64, 64)


def test_served_item_fills_the_open_spatial_size() -> None:
    from generator.serving.runner import served_item

    assert served_item([-1, -1, 3], (640, 480)) == [640, 480, 3]  # a dynamic-size export, uint8 NHWC
    assert served_item([640, 640, 3], (640, 640)) == [640, 640, 3]
    assert served_item([3, -1, -1], (320, 320)) == [3, 320, 320]  # --normalise-in preprocess: float NCHW
    assert served_item([1, 64, 64, 3], (64, 64)) == [64, 64, 3]  # full dims of a non-batching config


# A child pinned to the first CPU this process may use: it makes a session, runs it, and reports the new threads'
# CPU masks (Linux: /proc/self/task). ``default`` is a session with ONNX Runtime's own thread default, for contrast.
_PINNED_CHILD = """
import json, os, sys, time
from pathlib import Path
import numpy as np
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})

def masks():
    out = {}
    for task in Path("/proc/self/task").iterdir():
        line = [l for l in (task / "status").read_text().splitlines() if l.startswith("Cpus_allowed_list")][0]
        out[task.name] = line.split(":", 1)[1].strip()
    return out

from generator.serving.runner import OnnxRunner
from tests.fixtures.onnx_factory import make_detector, save
path = save(make_detector("v8", batch="batch", seed=5), Path(sys.argv[1]))
images = np.zeros((2, 3, 64, 64), np.float32)
report, keep = {"cpu": str(cpu)}, []
for name, threads in (("zero", 0), ("two", 2), ("default", None)):
    before = masks()
    if threads is None:
        import onnxruntime as ort
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        session.run(None, {"images": images})
        count = session.get_session_options().intra_op_num_threads
    else:
        runner = OnnxRunner(str(path), intra_op_threads=threads, spin_wait=True)
        runner.run(images)
        session, count = runner._session, runner._session.get_session_options().intra_op_num_threads
    keep.append(session)  # alive: its threads too
    time.sleep(0.5)  # a new worker sets its own affinity when it first runs: let it have the CPU
    report[name] = {"threads": count, "new": sorted(m for t, m in masks().items() if t not in before)}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def pinned_child(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import os
    import subprocess
    import sys

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and two CPUs, to pin a child to fewer CPUs than it could use")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", _PINNED_CHILD, str(tmp_path_factory.mktemp("pinned") / "m.onnx")],
                          capture_output=True, text=True, cwd=root, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_default_thread_count_is_the_cpus_this_process_may_use(pinned_child: dict[str, Any]) -> None:
    # Pinned to one CPU: one intra-op thread (ONNX Runtime then makes no pool), so nothing runs elsewhere.
    assert pinned_child["zero"]["threads"] == 1
    assert all(mask == pinned_child["cpu"] for mask in pinned_child["zero"]["new"])


def test_an_explicit_thread_count_stays_inside_the_pinning(pinned_child: dict[str, Any]) -> None:
    two = pinned_child["two"]
    assert two["threads"] == 2 and two["new"], "two intra-op threads make a pool with a worker thread"
    assert set(two["new"]) == {pinned_child["cpu"]}


def test_onnx_runtimes_own_default_would_leave_the_pinning_here(pinned_child: dict[str, Any]) -> None:
    # Why the runner never passes 0: ONNX Runtime sizes that pool by the machine's physical cores and pins each
    # worker to one of them. Where it counts one physical core it makes no pool, and there is nothing to see.
    default = pinned_child["default"]
    if not default["new"]:
        pytest.skip("ONNX Runtime counts one physical core on this machine: its default makes no thread pool")
    assert default["threads"] == 0 and set(default["new"]) - {pinned_child["cpu"]}


def test_a_runner_in_this_process_takes_a_thread_per_usable_core(tmp_path: Path) -> None:
    import os

    runner = OnnxRunner(str(save(make_detector("v8", batch="batch", seed=5), tmp_path / "m.onnx")))
    options = runner._session.get_session_options()
    assert options.intra_op_num_threads == len(os.sched_getaffinity(0))
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


@pytest.mark.parametrize(("spin_wait", "spin_stop", "allow", "stop"), [
    (False, False, "0", None),  # the served default: workers sleep
    (True, False, "1", None),  # ONNX Runtime's default: workers spin, also between runs
    (True, True, "1", "1"),  # --detector-spin run: workers spin only while a run lasts
    (False, True, "0", None),  # nothing to stop when they never spin
])
def test_spin_settings_reach_the_session(tmp_path: Path, spin_wait: bool, spin_stop: bool, allow: str,
                                         stop: str | None) -> None:
    path = save(make_detector("v8", batch="batch", seed=5), tmp_path / "spin.onnx")
    runner = OnnxRunner(str(path), intra_op_threads=1, spin_wait=spin_wait, spin_stop=spin_stop)
    options = runner._session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == allow
    if stop is None:  # not set: ONNX Runtime's own behaviour (keep spinning between runs, when spinning)
        with pytest.raises(Exception, match="does not have configuration with key"):
            options.get_session_config_entry("session.force_spinning_stop")
    else:
        assert options.get_session_config_entry("session.force_spinning_stop") == stop
