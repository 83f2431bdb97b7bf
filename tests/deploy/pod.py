"""The deployment's pod, run here: the rendered entry point, watchdog, Triton and nginx, on loopback.

What runs is what compose and Kubernetes run, with only the paths and ports of this machine swapped in:
``deploy.entrypoints.build_models`` fills a volume directory and points ``current`` at the build; ``deploy.entrypoints.serve_models``
checks it and becomes the watchdog, which runs the embedded Triton 2.51 (the same tritonserver the NGC
images ship, older) with the rendered flags; Debian's nginx runs the rendered ``proxy/nginx.conf`` with a
self-signed certificate, as an unprivileged user like in the containers.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy import commands
from deploy.entrypoints import build_models
from deploy.render.files import NGINX_CONF, render_all, write_rendered
from deploy.settings import Settings
from generator.server.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
WATCHDOG = REPO / "generator" / "server" / "watchdog.py"
TOKEN = "integration-admin-token-0123456789"
# Flags the embedded Triton 2.51 cannot take as rendered: --http-max-input-size exists from 2.59 on (the
# proxy enforces the same limit), and metrics stay on loopback on this shared machine.
NOT_PASSED = ("--http-max-input-size=", "--metrics-address=")
NOBODY = 65534


def pod_settings(**overrides: Any) -> Settings:
    http, grpc, metrics, https, grpcs, watchdog, health = free_ports(7)
    return Settings(http_port=http, grpc_port=grpc, metrics_port=metrics, proxy_http_port=https,
                    proxy_grpc_port=grpcs, watchdog_metrics_port=watchdog, proxy_health_port=health, **overrides)


def make_certificate(directory: Path) -> Path:
    """A self-signed certificate for localhost as tls.crt/tls.key (the names the Kubernetes TLS Secret uses)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
        check=True, capture_output=True,
    )
    return directory / "tls.crt"


def install_repository(volume: Path, settings: Settings) -> Path:
    """The builder's step with the rendered build flags, for the target this machine serves (embedded)."""
    from generator.demo import DEMO_ONNX

    return build_models.fill(volume, commands.CURRENT_LINK,
                             commands.build_args(settings, "embedded", onnx=str(DEMO_ONNX)), versioned=False)


def serve_argv(settings: Settings, volume: Path) -> tuple[list[str], dict[str, str]]:
    """The rendered Triton container command with this machine's interpreter, watchdog, server and volume."""
    from generator.server.embedded import EmbeddedServer, ensure_server

    install = ensure_server()
    local = {commands.MODEL_REPOSITORY: str(volume / commands.CURRENT_LINK), commands.WATCHDOG_PATH: str(WATCHDOG),
             commands.WATCHDOG_STATE: str(volume.parent / f"{volume.name}-watchdog-state.json")}
    argv = []
    for arg in commands.serve_command(settings, gpu=False, token=TOKEN):
        for path, here in local.items():
            arg = arg.replace(path, here)
        if arg.startswith(NOT_PASSED):
            continue
        if arg.startswith("--watchdog-metrics-port="):
            argv.append("--watchdog-metrics-address=127.0.0.1")  # loopback on this shared machine, like metrics
        if arg == "tritonserver":
            argv += [str(install.binary), f"--backend-directory={install.backends}", "--metrics-address=127.0.0.1"]
            continue
        argv.append(arg)
    argv[0] = sys.executable
    return argv, EmbeddedServer(volume).environment(install)


def _nginx_binary() -> str:
    path = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if path is None:
        pytest.fail("nginx is not installed: `apt-get install nginx` (.ci/run installs it)")
    return path


def start_nginx(settings: Settings, root: Path, volume: Path | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """The rendered proxy config with a fresh certificate, run as an unprivileged user like in the containers; with
    ``volume``, its in-flight limit is the one the builder's step wrote there (the container's /models)."""
    conf = render_all(settings)[NGINX_CONF]
    if volume is not None:
        conf = conf.replace(f"include {commands.MODELS_VOLUME}/", f"include {volume}/")
    write_rendered({NGINX_CONF: conf}, root)
    ca = make_certificate(root / "proxy" / "tls")
    prefix = root / "run"
    prefix.mkdir()
    log = root / "nginx-access.log"
    log.touch()
    demote: dict[str, Any] = {}
    if os.geteuid() == 0:  # the containers run nginx as a non-root user: so does the test
        for path in (root, root / "proxy", root / "proxy" / "tls", root / "proxy" / "tls" / "tls.key",
                     root / "proxy" / "nginx.conf", prefix, log):
            os.chown(path, NOBODY, NOBODY)
        demote = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    command = [_nginx_binary(), "-p", f"{prefix}/", "-c", str(root / NGINX_CONF), "-e", "stderr"]
    with log.open("ab") as out, (root / "nginx-error.log").open("ab") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True, **demote)
    return process, ca


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} is not listening on {port} after {timeout_s:.0f} s")


def wait_healthy(settings: Settings, process: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    """Until the watchdog's own probe passes on Triton's loopback port."""
    from generator.server import watchdog

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Triton entry point exited with code {process.returncode}")
        try:
            watchdog.probe(f"127.0.0.1:{settings.http_port}", [settings.model_name], 5.0)
            return
        except watchdog.ProbeError:
            time.sleep(0.5)
    raise RuntimeError(f"Triton was not healthy after {timeout_s:.0f} s")


def stop(process: subprocess.Popen[bytes] | None, sig: int, timeout_s: float = 60) -> int | None:
    """Ask politely (SIGTERM drains Triton, SIGQUIT drains nginx), then kill the process group."""
    if process is None or process.poll() is not None:
        return None if process is None else process.returncode
    process.send_signal(sig)
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


@dataclass
class Pod:
    settings: Settings
    volume: Path
    root: Path
    ca: Path
    serve: subprocess.Popen[bytes]
    nginx: subprocess.Popen[bytes]

    @property
    def grpcs_url(self) -> str:
        return f"grpcs://localhost:{self.settings.proxy_grpc_port}"

    @property
    def https_url(self) -> str:
        return f"https://localhost:{self.settings.proxy_http_port}"

    @property
    def direct_grpc(self) -> str:
        return f"127.0.0.1:{self.settings.grpc_port}"

    @property
    def direct_http(self) -> str:
        return f"127.0.0.1:{self.settings.http_port}"

    def tls_options(self, protocol: str) -> dict[str, Any]:
        """tritonclient options that trust the pod's self-signed certificate."""
        return {"root_certificates": str(self.ca)} if protocol == "grpc" else {"ssl_options": {"ca_certs": str(self.ca)}}

    def triton_tree_rss(self) -> int:
        """Resident memory of tritonserver and its backend stubs (the watchdog excluded)."""
        import psutil

        processes = [p for p in psutil.Process(self.serve.pid).children(recursive=True)]
        return sum(p.memory_info().rss for p in processes if p.is_running())


@contextmanager
def running_pod(settings: Settings) -> Iterator[Pod]:
    """Build, serve and proxy as the deployment does; everything is stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="deploy-pod-"))
    root.chmod(0o755)
    volume = root / "models"
    volume.mkdir()
    serve = nginx = None
    try:
        install_repository(volume, settings)
        argv, env = serve_argv(settings, volume)
        with (root / "serve.log").open("ab") as log:
            serve = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        nginx, ca = start_nginx(settings, root, volume)
        wait_for_port(settings.proxy_grpc_port, nginx, "nginx")
        wait_healthy(settings, serve)
        yield Pod(settings, volume, root, ca, serve, nginx)
    except Exception:
        for name in ("serve.log", "nginx-error.log"):
            if (root / name).exists():
                print(f"--- {name}\n" + (root / name).read_text(errors="replace")[-4000:])
        raise
    finally:
        stop(nginx, signal.SIGQUIT)
        stop(serve, signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)
