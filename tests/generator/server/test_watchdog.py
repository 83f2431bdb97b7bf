"""The watchdog's probe and supervisor against a stand-in server process; real Triton: tests/integration."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import psutil
import pytest

from generator.server import gpu_metrics, histogram_export, jetson_metrics, watchdog
from generator.server.ports import free_port
from generator.serving import contract

STANDIN = Path(__file__).with_name("standin_server.py")


class Standin:
    """A stand-in server process whose behaviour a test switches through its state file."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.state = tmp_path / "state"
        self.set("healthy")

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        return [sys.executable, str(STANDIN), str(self.port), str(self.state)]

    def set(self, state: str) -> None:
        self.state.write_text(state)

    def log(self) -> list[str]:
        path = Path(f"{self.state}.log")
        return path.read_text().split() if path.exists() else []

    def requests(self) -> list[dict]:
        path = Path(f"{self.state}.requests")
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def priorities(self) -> list[int]:
        return [r["priority"] for r in self.requests()]

    def answered_healthy(self) -> bool:
        """A probe got a healthy answer: the supervisor is past its start and watching."""
        return any(r["answered"] not in ("broken", "dead-stub") for r in self.requests())


@pytest.fixture
def standin(tmp_path: Path) -> Standin:
    return Standin(tmp_path)


@pytest.fixture
def running(standin: Standin):
    process = subprocess.Popen(standin.command)
    deadline = time.monotonic() + 20
    while True:
        try:
            watchdog.probe(standin.url, ["m"], 1.0)
            break
        except watchdog.ProbeError:
            assert time.monotonic() < deadline, "the stand-in server did not start"
            time.sleep(0.05)
    yield standin
    process.kill()
    process.wait()


def supervise(standin: Standin, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "generator.server.watchdog", "supervise", "--url", standin.url, "--model", "m",
         "--failures", "2", "--interval-s", "0.2", "--timeout-s", "1", "--start-timeout-s", "20", *extra,
         "--", *standin.command],
        stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )


@pytest.fixture
def fake_stub(tmp_path: Path) -> Path:
    """A Python under the stub's name: its processes look like Python-backend stubs in /proc."""
    link = tmp_path / "bin" / "triton_python_backend_stub"
    link.parent.mkdir()
    link.symlink_to(sys.executable)
    return link


def wait_until(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# --- the file itself -----------------------------------------------------------------------------------------


def test_uses_only_the_standard_library() -> None:
    """It is copied into the Triton image with gpu_metrics.py and histogram_export.py beside it (and jetson_metrics.py
    in the Jetson image; it imports them where it can), where the project and its dependencies are not installed;
    gpu_metrics.py imports its NVML binding lazily."""
    for module, allowed in ((watchdog, {"gpu_metrics", "histogram_export", "jetson_metrics", "generator"}),
                            (gpu_metrics, set()), (histogram_export, set()), (jetson_metrics, set())):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert roots - {"__future__", "pynvml"} - allowed <= set(sys.stdlib_module_names), module.__name__
        assert all(((n.module or "") if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0]
                   in {*sys.stdlib_module_names, "__future__"} for n in top), module.__name__


def test_probe_speaks_the_ensemble_contract() -> None:
    assert watchdog.INPUT_NAME == contract.IMAGE
    assert watchdog.COUNT_OUTPUT == contract.NUM_DETECTIONS
    assert watchdog.PROBE_PARAMETER == contract.PROBE_PARAMETER
    image = cv2.imdecode(np.frombuffer(watchdog.PROBE_JPEG, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None and image.shape == (32, 32, 3)


def test_inference_request_has_the_highest_priority_and_is_marked_a_probe() -> None:
    body, header_len = watchdog.build_infer_body(b"abc")
    header = json.loads(body[:header_len])
    assert header["parameters"] == {"priority": 1, "tde_probe": True}  # marked: left out of the quality metrics
    assert header["inputs"][0]["parameters"]["binary_data_size"] == 4 + 3 == len(body) - header_len


@pytest.mark.parametrize(
    ("url", "expected"),
    [("127.0.0.1:8000", ("127.0.0.1", 8000)), ("http://triton:9000/", ("triton", 9000)),
     ("localhost", ("localhost", 8000)), ("[::1]:8001", ("::1", 8001)), ("[::1]", ("::1", 8000))],
)
def test_parse_address(url: str, expected: tuple[str, int]) -> None:
    assert watchdog.parse_address(url) == expected


@pytest.mark.parametrize("url", ["grpc://h:8001", "h:99999", "h:port", ":8000"])
def test_parse_address_rejects(url: str) -> None:
    with pytest.raises(watchdog.ProbeError):
        watchdog.parse_address(url)


# --- the probe ---------------------------------------------------------------------------------------------


def test_probe_passes_and_sends_priority_1(running: Standin) -> None:
    assert watchdog.main(["probe", "--url", running.url, "--model", "m"]) == 0
    assert running.priorities() and set(running.priorities()) == {1}


def test_probe_fails_on_a_failing_inference(running: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    running.set("broken")
    assert watchdog.main(["probe", "--url", running.url, "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert err == "unhealthy: inference on m failed (HTTP 500): in ensemble 'm', onnx runtime error 6: something failed\n"


@pytest.mark.parametrize(("state", "lasting"), [("broken", False), ("dead-stub", True)])
def test_a_dead_stub_is_a_lasting_failure(running: Standin, state: str, lasting: bool) -> None:
    running.set(state)
    with pytest.raises(watchdog.ProbeError) as info:
        watchdog.probe(running.url, ["m"])
    assert info.value.lasting is lasting


def test_probe_fails_on_time_when_the_inference_hangs(running: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    running.set("hang")
    start = time.monotonic()
    assert watchdog.main(["probe", "--url", running.url, "--model", "m", "--timeout-s", "0.5"]) == 1
    assert time.monotonic() - start < 2.0
    assert "no answer from Triton" in capsys.readouterr().err


def test_probe_fails_when_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    assert watchdog.main(["probe", "--url", f"127.0.0.1:{free_port()}", "--model", "m"]) == 1
    assert capsys.readouterr().err.startswith("unhealthy: cannot reach Triton at 127.0.0.1:")


def test_probe_runs_alone_without_site_packages(tmp_path: Path) -> None:
    copy = tmp_path / "watchdog.py"
    copy.write_text(Path(watchdog.__file__).read_text())
    proc = subprocess.run([sys.executable, "-S", "-I", str(copy), "probe", "--url", f"127.0.0.1:{free_port()}",
                           "--model", "m"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot reach Triton" in proc.stderr


# --- the supervisor ----------------------------------------------------------------------------------------


def test_supervise_stops_an_unhealthy_server_and_exits_1(standin: Standin) -> None:
    process = supervise(standin, "--grace-s", "5")
    wait_until(standin.answered_healthy)
    standin.set("broken")
    assert process.wait(30) == watchdog.EXIT_UNHEALTHY
    stderr = process.stderr.read() if process.stderr else ""
    assert "probe failed (2 of the last 2)" in stderr and "Triton is unhealthy" in stderr
    assert standin.log() == ["TERM"]  # asked to stop first, and it did


def test_supervise_stops_at_once_for_a_dead_stub(standin: Standin) -> None:
    process = supervise(standin, "--grace-s", "5", "--failures", "5")
    wait_until(standin.answered_healthy)
    standin.set("dead-stub")
    assert process.wait(30) == watchdog.EXIT_UNHEALTHY
    stderr = process.stderr.read() if process.stderr else ""
    assert "probe failed (1 of the last 1)" in stderr and "a failure that does not heal" in stderr
    assert "probe failed (2 of" not in stderr


def test_python_stubs_are_found_by_parent_and_name(fake_stub: Path) -> None:
    stub = subprocess.Popen([str(fake_stub), "-c", "import time; time.sleep(60)", "m.py", "m_nms_0_0", "DEFAULT"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        wait_until(lambda: stub.pid in watchdog.python_stubs(os.getpid()))
        found = watchdog.python_stubs(os.getpid())
        assert found[stub.pid] == "m_nms_0_0" and other.pid not in found
        stub.kill()
        wait_until(lambda: stub.pid not in watchdog.python_stubs(os.getpid()))  # a zombie does not count
    finally:
        for process in (stub, other):
            process.kill()
            process.wait()
    assert watchdog.python_stubs(stub.pid) == {}


def test_supervise_stops_when_a_stub_exits(standin: Standin, fake_stub: Path) -> None:
    """Even while every probe passes: a step with a second, live instance answers most probes."""
    process = supervise(standin, "--grace-s", "5", "--interval-s", "30", env={"STANDIN_STUB": str(fake_stub)})
    wait_until(standin.answered_healthy)
    server = next(p for p in psutil.Process(process.pid).children() if "standin" in " ".join(p.cmdline()))
    wait_until(lambda: bool(watchdog.python_stubs(server.pid)))
    time.sleep(1.5)  # the supervisor has taken its census of the stubs
    (stub_pid,) = watchdog.python_stubs(server.pid)
    start = time.monotonic()
    os.kill(stub_pid, signal.SIGKILL)
    assert process.wait(30) == watchdog.EXIT_UNHEALTHY
    assert time.monotonic() - start < 5
    stderr = process.stderr.read() if process.stderr else ""
    assert "the Python-backend stub of m_preprocess_0_0 exited" in stderr


def test_supervise_kills_a_server_that_ignores_sigterm(standin: Standin) -> None:
    process = supervise(standin, "--grace-s", "1")
    wait_until(standin.answered_healthy)
    standin.set("ignore-term")  # still answers probes, but does not stop on SIGTERM
    process.send_signal(signal.SIGTERM)
    start = time.monotonic()
    code = process.wait(30)
    assert 0.8 < time.monotonic() - start < 10
    assert code == 128 + signal.SIGKILL
    assert standin.log() == ["TERM"]


def test_supervise_forwards_sigterm_for_a_drain(standin: Standin) -> None:
    process = supervise(standin, "--grace-s", "20")
    wait_until(standin.answered_healthy)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert standin.log() == ["TERM"]


def test_supervise_gives_up_when_never_healthy(standin: Standin) -> None:
    standin.set("broken")
    process = supervise(standin, "--grace-s", "5", "--start-timeout-s", "1.5")
    assert process.wait(30) == 1
    assert process.stderr is not None
    assert "Triton did not become healthy: not healthy 1.5 s after start" in (process.stderr.read() or "")


def test_supervise_needs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert watchdog.main(["supervise", "--model", "m"]) == 1
    assert "no server command" in capsys.readouterr().err


def test_restart_mode_restarts_a_server_that_exits(standin: Standin) -> None:
    healthy: list[int] = []
    processes: list[subprocess.Popen[bytes]] = []

    def launch() -> subprocess.Popen[bytes]:
        processes.append(subprocess.Popen(standin.command, start_new_session=True))
        return processes[-1]

    policy = watchdog.WatchPolicy(failures=2, interval_s=0.2, timeout_s=1.0, grace_s=5.0)
    supervisor = watchdog.Supervisor(launch, standin.url, ["m"], policy, restart=True, on_healthy=healthy.append)
    thread = threading.Thread(target=lambda: setattr(supervisor, "code", supervisor.run()))
    thread.start()
    try:
        wait_until(lambda: healthy == [1])
        processes[0].kill()  # the server dies: a new one must serve
        wait_until(lambda: healthy == [1, 2])
        standin.set("broken")  # the new one stops answering: stopped and replaced by a third
        wait_until(lambda: len(processes) == 3)
        standin.set("healthy")
        wait_until(lambda: healthy == [1, 2, 3])
        assert processes[1].poll() == 0 and standin.log() == ["TERM"]
    finally:
        supervisor.request_stop()
        thread.join(30)
    assert supervisor.code == 0 and all(p.poll() is not None for p in processes)  # type: ignore[attr-defined]


def test_restart_on_restarts_those_reasons_in_place_and_exits_for_the_others(standin: Standin) -> None:
    """The container's supervisor: a lost stub (here: failing probes) gets a fresh server in place; a server that
    exits is the restart policy's, so the supervisor exits 1."""
    healthy: list[int] = []
    processes: list[subprocess.Popen[bytes]] = []

    def launch() -> subprocess.Popen[bytes]:
        processes.append(subprocess.Popen(standin.command, start_new_session=True))
        return processes[-1]

    policy = watchdog.WatchPolicy(failures=2, interval_s=0.2, timeout_s=1.0, grace_s=5.0)
    supervisor = watchdog.Supervisor(launch, standin.url, ["m"], policy, on_healthy=healthy.append,
                                     restart_on=["probe_failures"])
    thread = threading.Thread(target=lambda: setattr(supervisor, "code", supervisor.run()))
    thread.start()
    try:
        wait_until(lambda: healthy == [1])
        standin.set("broken")
        wait_until(lambda: len(processes) == 2)  # restarted in place
        standin.set("healthy")
        wait_until(lambda: healthy == [1, 2])
        processes[1].kill()  # not a reason to restart in place
        thread.join(30)
    finally:
        supervisor.request_stop()
        thread.join(30)
    assert supervisor.code == watchdog.EXIT_UNHEALTHY  # type: ignore[attr-defined]
    assert supervisor.metrics.restarts["probe_failures"] == 1 and supervisor.metrics.restarts["server_exited"] == 1
    with pytest.raises(ValueError, match="cannot restart on nonsense"):
        watchdog.Supervisor(launch, standin.url, ["m"], policy, restart_on=["nonsense"])


@pytest.mark.parametrize(
    ("history", "failures", "verdict"),
    [("ff", 2, True), ("fpf", 2, True), ("fppf", 2, False), ("pff", 2, True), ("fpfpf", 3, True),
     ("ffppp", 3, False), ("fpfpp", 3, False), ("f", 1, True), ("p", 1, False)],
)
def test_unhealthy_after_n_failures_in_a_window_of_2n_minus_1(history: str, failures: int, verdict: bool) -> None:
    """N in a row, or a server failing every other probe (one of two instances has a dead stub)."""
    assert watchdog.unhealthy([c == "f" for c in history], failures) is verdict


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="failures"):
        watchdog.WatchPolicy(failures=0)
    with pytest.raises(ValueError, match="interval_s"):
        watchdog.WatchPolicy(interval_s=0)


# --- the watchdog's own metrics --------------------------------------------------------------------------------


def scrape_watchdog(port: int) -> dict[str, float]:
    import urllib.request

    from loadtest.metrics import parse_prometheus

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {s.name + "".join(f"{{{k}={v}}}" for k, v in s.labels.items()): s.value for s in parse_prometheus(text)}


def test_restarts_are_counted_by_reason_across_restarts_of_the_watchdog(standin: Standin, tmp_path: Path) -> None:
    """A container's watchdog exits 1 for each restart: the state file carries the counts to the next one."""
    state = tmp_path / "watchdog" / "counters.json"
    for run, fault in enumerate(("broken", "dead-stub"), start=1):
        port = free_port()
        standin.set("healthy")
        Path(f"{standin.state}.requests").unlink(missing_ok=True)  # answered_healthy looks at this run only
        process = supervise(standin, "--grace-s", "5", "--metrics-port", str(port), "--metrics-address",
                            "127.0.0.1", "--state-file", str(state))
        wait_until(standin.answered_healthy)
        wait_until(lambda port=port: scrape_watchdog(port).get("triton_watchdog_healthy") == 1.0)
        seen = scrape_watchdog(port)
        assert seen["triton_watchdog_server_starts_total"] == run
        standin.set(fault)
        assert process.wait(30) == watchdog.EXIT_UNHEALTHY
    saved = json.loads(state.read_text())
    assert saved["restarts"] == {**dict.fromkeys(watchdog.RESTART_REASONS, 0), "probe_failures": 1, "dead_stub": 1}
    assert saved["starts"] == 2 and saved["failed_probes"] == 3  # two in a row, then one dead stub
    assert seen['triton_watchdog_restarts_total{reason=probe_failures}'] == 1  # the first run's, read back


def test_metrics_text_and_an_unreadable_state_file(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{not json")
    metrics = watchdog.WatchdogMetrics(state)  # logged and ignored: the counters start from zero
    metrics.count(restart="stub_exited", failed_probe=True, start=True)
    text = metrics.render()
    assert 'triton_watchdog_restarts_total{reason="stub_exited"} 1\n' in text
    assert "triton_watchdog_failed_probes_total 1\n" in text and "triton_watchdog_healthy 0\n" in text
    assert json.loads(state.read_text())["restarts"]["stub_exited"] == 1


def test_explicit_mode_tells_an_unloaded_models_stub_from_a_dead_one() -> None:
    """Under explicit model control a stub also ends when its model is unloaded: only one whose model still
    answers ready (a dead stub leaves it ready on 2.51) counts, and only after the probe timeout."""
    import http.server
    import threading

    ready = {"/v2/models/m_nms/ready"}

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path in ready else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"127.0.0.1:{server.server_address[1]}"
        assert watchdog.instance_model("yolo_v2_nms_0_1") == "yolo_v2_nms"
        assert watchdog.instance_model("odd") == "odd"
        assert watchdog.still_loaded(url, "m_nms_0_0", 1.0) and not watchdog.still_loaded(url, "m_pre_0_0", 1.0)
        supervisor = watchdog.Supervisor(lambda: None, url, ["m"], watchdog.WatchPolicy(timeout_s=0.2),  # type: ignore[arg-type, return-value]
                                         explicit=True)
        suspects: dict[str, float] = {}
        assert supervisor._unexplained(["m_nms_0_0", "m_pre_0_0"], suspects) == []  # both under watch at first
        assert set(suspects) == {"m_nms_0_0"}  # the unloaded one is explained at once
        time.sleep(0.25)
        assert supervisor._unexplained([], suspects) == ["m_nms_0_0"]  # still ready after the timeout: dead
    finally:
        server.shutdown()
