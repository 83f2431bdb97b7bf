"""deploy/entrypoints/serve_models.py: the Triton container checks its repository, then serves it under the watchdog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from deploy.entrypoints import serve_models
from deploy.settings import Settings
from generator.demo import DEMO_ONNX

from .pod import WATCHDOG, install_repository, pod_settings, running_pod, stop


def _serve(repository: Path, server: list[str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "deploy.entrypoints.serve_models", f"--repository={repository}", f"--watchdog={WATCHDOG}",
            "--url=127.0.0.1:1", "--model=yolo", "--failures=1", "--interval-s=1", "--timeout-s=0.5",
            "--grace-s=1", "--", *server]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _build(output: Path, *flags: str) -> Path:
    subprocess.run([sys.executable, "-m", "generator", "build", "--onnx", str(DEMO_ONNX), "--output", str(output),
                    *flags], check=True, capture_output=True)
    return output


def test_a_plan_never_built_stops_the_container_before_triton_starts(tmp_path: Path) -> None:
    repository = _build(tmp_path / "repo", "--target", "tensorrt", "--defer-plan", "--version-compatible")
    marker = tmp_path / "server-ran"
    result = _serve(repository, [sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert result.returncode == 1
    assert "has not been built yet" in result.stderr and "python -m generator plan" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("serve_models: generator check refused")
    assert not marker.exists()


def test_a_changed_file_stops_the_container_before_triton_starts(tmp_path: Path) -> None:
    volume = tmp_path / "models"
    volume.mkdir()
    repository = install_repository(volume, pod_settings())
    config = repository / "yolo_nms" / "config.pbtxt"
    config.write_text(config.read_text() + "\n# edited by hand\n")
    marker = tmp_path / "server-ran"
    result = _serve(volume / "current", [sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert result.returncode == 1 and "yolo_nms/config.pbtxt" in result.stderr
    assert not marker.exists()


def test_a_version_compatible_plan_gets_its_backend_flag_after_the_server_command(tmp_path: Path) -> None:
    repository = _build(tmp_path / "repo", "--target", "tensorrt", "--defer-plan", "--version-compatible")
    # The check's interface the entry point reads: the flags on stdout (this plan still fails: not built here).
    printed = subprocess.run([sys.executable, "-m", "generator", "check", "--server-flags", str(repository)],
                             capture_output=True, text=True, check=False)
    flags = printed.stdout.split()
    assert printed.returncode == 1 and flags == ["--backend-config=tensorrt,version-compatible=true"]
    args = serve_models._parser().parse_args([f"--repository={repository}", f"--watchdog={WATCHDOG}",
                                              "--url=127.0.0.1:8000", "--model=yolo", "--failures=3",
                                              "--interval-s=10", "--timeout-s=5", "--grace-s=40"])
    argv = serve_models.supervise_argv(args, ["tritonserver", "--model-repository=/models/current"], flags)
    assert argv[1:3] == [str(WATCHDOG), "supervise"]
    assert argv[argv.index("--") + 1:] == ["tritonserver", "--model-repository=/models/current", *flags]
    plain = _build(tmp_path / "plain", "--target", "onnxruntime")
    assert serve_models.checked_flags(plain) == []


def test_missing_server_command_or_watchdog_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = [f"--repository={tmp_path}", "--url=127.0.0.1:8000", "--model=yolo", "--failures=3",
              "--interval-s=10", "--timeout-s=5", "--grace-s=40"]
    assert serve_models.main([*common, f"--watchdog={WATCHDOG}"]) == 1
    assert serve_models.main([*common, f"--watchdog={tmp_path / 'nope.py'}", "--", "tritonserver"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no server command" in err[0] and "watchdog" in err[1]


def _stub_pids(server_pid: int, model: str) -> list[int]:
    return [p.pid for p in psutil.Process(server_pid).children(recursive=True)
            if any(model in part for part in p.cmdline())]


def _tritonserver(serve_pid: int) -> psutil.Process:
    (server,) = [p for p in psutil.Process(serve_pid).children() if "tritonserver" in " ".join(p.cmdline())]
    return server


def _serving(settings: Settings) -> bool:
    from generator.server import watchdog

    try:
        watchdog.probe(f"127.0.0.1:{settings.http_port}", [settings.model_name], settings.probe_timeout_s)
    except watchdog.ProbeError:
        return False
    return True


@pytest.mark.integration
@pytest.mark.slow
def test_a_dead_python_stub_restarts_tritonserver_in_place() -> None:
    """Triton 2.51 keeps /v2/health/ready at 200 after a stub dies and never restarts it; the watchdog sees the stub
    gone and starts a fresh tritonserver in the same container (--restart-on), which loads in seconds: the entry
    point keeps running and serves again without the container's restart."""
    settings = pod_settings(probe_interval_s=5, probe_timeout_s=4, probe_failures=2)
    with running_pod(settings) as pod:
        # The supervisor watches only once its own probe has passed (until then Triton is still starting):
        # give it one interval after ours passed.
        time.sleep(settings.probe_interval_s)
        first = _tritonserver(pod.serve.pid)
        stubs = _stub_pids(pod.serve.pid, "yolo_preprocess")
        assert stubs, "no Python-backend stub process found for yolo_preprocess"
        for pid in stubs:
            os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        while time.monotonic() - started < 60 and (not first.is_running() or first.status() != "zombie"):
            if not first.is_running() and _serving(settings):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        assert pod.serve.poll() is None, "the entry point exited instead of restarting tritonserver in place"
        assert not first.is_running() and _tritonserver(pod.serve.pid).pid != first.pid
        assert _serving(settings), f"not serving {elapsed:.1f} s after the stub was killed"
        log = (pod.root / "serve.log").read_text()
        assert "restarting Triton" in log and "yolo_preprocess" in log  # the watchdog says why
        print(f"\nstub killed -> serving again after {elapsed:.1f} s (tritonserver restarted in place)")
        assert elapsed < 60


@pytest.mark.integration
@pytest.mark.slow
def test_an_exited_tritonserver_makes_the_entry_point_exit_non_zero() -> None:
    """tritonserver itself gone: the entry point exits 1 so the restart policy (compose) or the kubelet starts a
    fresh container, and `generator check` runs again before the next server."""
    settings = pod_settings(probe_interval_s=5, probe_timeout_s=4, probe_failures=2)
    with running_pod(settings) as pod:
        time.sleep(settings.probe_interval_s)
        _tritonserver(pod.serve.pid).kill()
        started = time.monotonic()
        code = pod.serve.wait(timeout=120)
        elapsed = time.monotonic() - started
        assert code == 1
        assert not [p for p in psutil.process_iter(["cmdline"]) if str(pod.volume) in " ".join(p.info["cmdline"] or [])]
        log = (pod.root / "serve.log").read_text()
        assert "Triton is unhealthy" in log and "tritonserver exited" in log  # the watchdog says why
        print(f"\ntritonserver killed -> entry point exited 1 after {elapsed:.1f} s")
        assert elapsed < 10  # the supervisor polls its child every 0.1 s


@pytest.mark.integration
def test_sigterm_drains_and_the_entry_point_exits_cleanly() -> None:
    with running_pod(pod_settings()) as pod:
        assert stop(pod.serve, signal.SIGTERM, timeout_s=90) == 0


def test_the_watchdog_gets_its_metrics_port_and_state_file_and_the_real_watchdog_takes_them() -> None:
    from deploy import commands
    from deploy.settings import Settings
    from generator.server import watchdog

    command = commands.serve_command(Settings(), gpu=True, token="t")
    head = command[: command.index("--")]
    args = serve_models._parser().parse_args(head[3:])
    argv = serve_models.supervise_argv(args, ["tritonserver"], [])
    assert argv[argv.index("--metrics-port") + 1] == "8003"
    assert argv[argv.index("--state-file") + 1] == commands.WATCHDOG_STATE
    parsed = watchdog.build_parser().parse_args(argv[2:])  # what watchdog.py supervise makes of it
    assert parsed.metrics_port == 8003 and str(parsed.state_file) == commands.WATCHDOG_STATE


def test_trace_settings_reach_the_tritonserver_command() -> None:
    from deploy import commands
    from deploy.settings import Settings, apply_overrides

    assert not any(a.startswith("--trace-config") for a in commands.triton_args(Settings(), gpu=True, token="t"))
    traced = apply_overrides(Settings(), {"trace_otlp_url": "http://otel-collector:4318", "trace_rate": "100"})
    args = commands.triton_args(traced, gpu=True, token="t")
    assert "--trace-config=mode=opentelemetry" in args and "--trace-config=rate=100" in args
    assert "--trace-config=opentelemetry,url=http://otel-collector:4318/v1/traces" in args
    assert "--trace-config=opentelemetry,resource=service.name=yolo-triton" in args
