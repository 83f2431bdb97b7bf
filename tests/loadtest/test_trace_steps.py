"""Triton's per-request trace timestamps, turned on over the HTTP trace API for one window at a time and split per
step: against a real embedded Triton 2.51 serving the demo ensemble (never a recorded or made-up trace)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from loadtest.closed_loop import client_factory
from loadtest.errors import LoadTestError
from loadtest.images import synthetic_images
from loadtest.trace_steps import STEP_PARTS, decompose, read_traces, read_window, trace_flags, traced

pytestmark = pytest.mark.integration
STEPS = ["yolo_preprocess", "yolo_detector", "yolo_nms"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, Path]]:
    root = tmp_path_factory.mktemp("traced")
    build_repository(DEMO_ONNX, root / "repo", BuildOptions(name="yolo", max_batch=4))
    trace_file = root / "trace.json"
    with EmbeddedServer(root / "repo", free_port(), free_port(), free_port(), log_file=root / "triton.log",
                        extra_args=trace_flags(trace_file)) as running:
        yield running, trace_file


def _send(server: EmbeddedServer, count: int) -> None:
    infer = client_factory("grpc", server.grpc_url, "yolo", 60)()
    for image in synthetic_images([(1280, 720)], per_size=count, seed=2):
        infer(image)


def test_a_traced_window_splits_each_request_into_its_steps(server: tuple[EmbeddedServer, Path]) -> None:
    running, trace_file = server
    _send(running, 2)  # tracing is off: these are not traced
    with traced(running.http_url, trace_file) as window:
        _send(running, 5)
    # read_window, as the breakdown reads: Triton writes a request's trace when its last reference goes, which
    # can be after the setting is retired, and flushes the file in buffer-sized pieces.
    found = decompose(read_window(trace_file, (window[0], window[1]), 5), (window[0], window[1]), "yolo")
    assert found["requests"] == 5 and found["model"] == "yolo" and found["steps"] == STEPS
    for step in STEPS:
        parts = found["steps_ms"][step]
        assert set(parts) == set(STEP_PARTS) and all(v is not None and v >= 0 for v in parts.values())
        assert parts["compute"] > 0
    # The steps run one after another inside the request: their hops, queues, inputs and computes fit in it.
    inside = sum(found["steps_ms"][s][p] for s in STEPS for p in ("hop", "queue", "input", "compute"))
    assert inside <= found["server_ms"] * 1.05
    assert found["receive"] is not None and found["send"] is not None and found["tail"] is not None


def test_each_window_counts_only_its_own_requests(server: tuple[EmbeddedServer, Path]) -> None:
    running, trace_file = server
    with traced(running.http_url, trace_file) as first:
        _send(running, 2)
    _send(running, 3)  # between the windows: off again
    with traced(running.http_url, trace_file) as second:
        _send(running, 3)
    # Each window waits for its own whole traces (read_window), then counts exactly those: more would mean
    # the requests between the windows, traced while tracing was off, leaked into one.
    assert decompose(read_window(trace_file, (first[0], first[1]), 2), (first[0], first[1]), "yolo")["requests"] == 2
    assert decompose(read_window(trace_file, (second[0], second[1]), 3), (second[0], second[1]), "yolo")["requests"] == 3
    tops = read_traces(trace_file)
    with pytest.raises(LoadTestError, match="no traced request in the window"):
        decompose(tops, (second[1] + 1, second[1] + 2), "yolo")


def test_a_file_triton_is_still_writing_reads_up_to_its_last_whole_entry(tmp_path: Path) -> None:
    # Triton 2.51 closes the array only at shutdown and flushes in buffer-sized pieces, so a read between windows
    # can end inside an entry: the whole entries before it count, the torn one waits for the next read.
    torn = tmp_path / "trace.json"
    torn.write_text('[{"id":1,"model_name":"yolo","model_version":1},'
                    '{"id":1,"timestamps":[{"name":"REQUEST_START","ns":5}]},{"id":2,"timesta')
    (top,) = read_traces(torn, wait_s=0)
    assert top.model == "yolo" and top.stamps == {"REQUEST_START": 5}


def test_an_open_file_that_ends_on_a_whole_entry_gives_that_entry_too(tmp_path: Path) -> None:
    # Cutting at the last separator withheld the newest entry (often a request's REQUEST_START) until the next
    # window wrote more: the window then counted one request fewer.
    open_file = tmp_path / "trace.json"
    open_file.write_text('[{"id":1,"model_name":"yolo","model_version":1},'
                         '{"id":1,"timestamps":[{"name":"REQUEST_START","ns":5}]},')
    (top,) = read_traces(open_file, wait_s=0)
    assert top.stamps == {"REQUEST_START": 5}
