"""The embedded default: a real Triton 2.51 server taken from the ``nvidia-pytriton`` wheel.

The wheel carries ``tritonserver``, its shared libraries, the Python backend and one backend stub per
Python version. It is fetched once with pip (so pip's index settings apply), verified by sha256, and
unpacked into a cache; the pytriton Python package itself is not used. The stubs run in an environment of
their own (numpy 1.26, see environments.py), not in the user's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from generator.cache import cache_root
from generator.errors import ServerError
from generator.server.environments import (
    Environment,
    LockedEnvironment,
    ensure_environment,
    stub_environment_for,
)
from generator.server.hardening import AdminAccess
from generator.server.shutdown import TEARDOWN_S, StopTiming
from generator.server.startup import exited_error, wait_ready
from generator.serving.contract import OPENCV_PIXEL_LIMIT, OPENCV_PIXEL_LIMIT_ENV

logger = logging.getLogger(__name__)

TRITON_VERSION = "2.51.0"
PYTRITON_VERSION = "0.5.13"
WHEEL_SHA256 = {
    "x86_64": "f10e7d876c9de94ff5dd653b968b2c12b4ddec87d8d40d6ced1dc1b4646fe2d1",
    "aarch64": "c9b9d475c3ae76b153f24439a32807a87646bc472b37faa2ffddf01c436fa013",
}
STUB_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12")
# The platform tag of the wheel per architecture, for fetching it for another machine (generator/server/offline.py).
WHEEL_PLATFORM = {"x86_64": "manylinux_2_35_x86_64", "aarch64": "manylinux_2_35_aarch64"}


@dataclass(frozen=True)
class ServerInstall:
    root: Path

    @property
    def binary(self) -> Path:
        return self.root / "tritonserver" / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        return self.root / "tritonserver" / "backends"

    @property
    def libraries(self) -> Path:
        return self.root / "libs"


def _python_tag() -> str:
    tag = f"{sys.version_info.major}.{sys.version_info.minor}"
    if tag not in STUB_PYTHONS:
        raise ServerError(
            f"the embedded Triton {TRITON_VERSION} ships Python-backend stubs for Python {', '.join(STUB_PYTHONS)}; "
            f"this is Python {tag}. Create the environment with one of those versions"
        )
    return tag


def _download_wheel(directory: Path) -> Path:
    arch = platform.machine()
    if arch not in WHEEL_SHA256:
        raise ServerError(f"the embedded Triton server is available for {sorted(WHEEL_SHA256)}, not {arch}")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               f"nvidia-pytriton=={PYTRITON_VERSION}", "--dest", str(directory)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = list(directory.glob("nvidia_pytriton-*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
        raise ServerError(
            f"could not download nvidia-pytriton=={PYTRITON_VERSION} from the package index "
            f"(pip said: {result.stderr.strip()[-300:]}); check network access to PyPI, or install from an "
            "offline archive (python -m generator serve --prepare --from-archive FILE)"
        )
    verify_wheel(wheels[0], arch)
    return wheels[0]


def verify_wheel(wheel: Path, arch: str) -> None:
    """Refuse a server wheel whose sha256 is not the one pinned for ``arch``."""
    if arch not in WHEEL_SHA256:
        raise ServerError(f"the embedded Triton server is available for {sorted(WHEEL_SHA256)}, not {arch}")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256[arch]:
        raise ServerError(f"{wheel.name} has sha256 {digest}, expected {WHEEL_SHA256[arch]}; refusing to use it")


def _unpack(wheel: Path, destination: Path, python_tag: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            name = member.filename
            if name.startswith("pytriton/tritonserver/") and not member.is_dir():
                target = destination / name.removeprefix("pytriton/")
            elif name.startswith("nvidia_pytriton.libs/") and not member.is_dir():
                target = destination / "libs" / Path(name).name
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
    stub = destination / "tritonserver" / "python_backend_stubs" / python_tag / "triton_python_backend_stub"
    python_backend = destination / "tritonserver" / "backends" / "python"
    shutil.copy2(stub, python_backend / "triton_python_backend_stub")
    for executable in (destination / "tritonserver" / "bin" / "tritonserver",
                       python_backend / "triton_python_backend_stub"):
        executable.chmod(0o755)


def server_location(python_tag: str | None = None) -> Path:
    return cache_root() / f"tritonserver-{TRITON_VERSION}-py{python_tag or _python_tag()}"


def ensure_server(wheel: Path | None = None) -> ServerInstall:
    """Return the cached server install, unpacking the pinned wheel the first time: ``wheel`` when given (an
    offline archive's, verified here again), else one fetched from the package index."""
    python_tag = _python_tag()
    root = server_location(python_tag)
    install = ServerInstall(root)
    if install.binary.exists():
        return install
    root.parent.mkdir(parents=True, exist_ok=True)
    logger.info("Unpacking Triton %s (nvidia-pytriton %s) into %s ...", TRITON_VERSION, PYTRITON_VERSION, root)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        if wheel is None:
            wheel = _download_wheel(Path(tmp) / "wheel")
        else:
            verify_wheel(wheel, platform.machine())
        staging = Path(tmp) / "install"
        _unpack(wheel, staging, python_tag)
        try:
            staging.rename(root)
        except OSError:  # another process unpacked it first
            if not install.binary.exists():
                raise
    return install


class EmbeddedServer:
    """Start ``tritonserver`` on loopback for a model repository; use as a context manager.

    `admin` restricts the admin API groups (``generator serve`` and the test server do, like deploy); without
    it every API is open. `exit_timeout_s` is the drain budget after SIGTERM (see shutdown.py). `stub` is the
    locked environment the Python-backend stubs run in; by default the GPU one when a Python model of the
    repository has KIND_GPU instances, else the CPU one.
    """

    def __init__(
        self,
        repository: Path,
        http_port: int = 8000,
        grpc_port: int = 8001,
        metrics_port: int = 8002,
        log_file: Path | None = None,
        extra_args: tuple[str, ...] = (),
        *,
        admin: AdminAccess | None = None,
        exit_timeout_s: int = 10,
        load_models: tuple[str, ...] | None = None,
        stub: LockedEnvironment | None = None,
    ) -> None:
        self.repository = repository.resolve()
        # None: model control "none" (everything in the repositories, fixed). A tuple: "explicit", these models
        # at start (an ensemble brings its steps), later ones through the admin load/unload API.
        self.load_models = load_models
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.log_file = log_file
        self.extra_args = extra_args
        self.admin = admin
        self.stop_timing = StopTiming(exit_timeout_s)
        self.stub = stub or stub_environment_for([self.repository])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def command(self, install: ServerInstall) -> list[str]:
        return [
            str(install.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={install.backends}",
            *self.model_control_args(),
            "--disable-auto-complete-config",
            "--strict-readiness=true",
            "--exit-on-error=true",
            "--http-address=127.0.0.1", f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
            "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            *self.stop_timing.server_args(),
            *(self.admin.server_args() if self.admin else ()),
            *self.extra_args,
        ]

    def model_control_args(self) -> list[str]:
        if self.load_models is None:
            return ["--model-control-mode=none"]
        return ["--model-control-mode=explicit", *(f"--load-model={m}" for m in self.load_models)]

    def prepare(self) -> tuple[ServerInstall, Environment]:
        """Fetch the server and make the stub environment if they are not in the cache yet."""
        return ensure_server(), ensure_environment(self.stub, cache_root())

    def environment(self, install: ServerInstall, stub: Environment | None = None) -> dict[str, str]:
        """The server's environment variables (the stub environment is made first when not given)."""
        stub = stub or ensure_environment(self.stub, cache_root())
        env = dict(os.environ)
        # The Python-backend stub embeds the first python on PATH (its sys.prefix and site-packages): the stub
        # environment's, so model.py files import its numpy 1.x, OpenCV and ONNX Runtime.
        env["PATH"] = f"{stub.bin}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONHOME", None)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(install.libraries), env.get("LD_LIBRARY_PATH")]))
        # Every backend stub inherits this: OpenCV's last line of defence against a decompression bomb.
        env.setdefault(OPENCV_PIXEL_LIMIT_ENV, str(OPENCV_PIXEL_LIMIT))
        # No __pycache__ in the model folders: Triton takes a folder whose files changed since it loaded it for a
        # new model, and reloads it (every step of a version in service) when an ensemble using it is loaded.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def start(self) -> None:
        self.launch()

    def launch(self) -> subprocess.Popen[bytes]:
        """Start a new server process (in its own process group, with the stubs) and return it."""
        if not (self.repository / "").is_dir():
            raise ServerError(f"model repository not found: {self.repository} (run python -m generator build first)")
        install, stub = self.prepare()
        log = self.log_file.open("ab") if self.log_file else None
        try:
            self.process = subprocess.Popen(
                self.command(install), env=self.environment(install, stub), stdout=log or None,
                stderr=subprocess.STDOUT if log else None, start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()  # the child has its own descriptor
        return self.process

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Block until every model is ready and the metrics endpoint answers; raise with the log's error line as
        soon as the server exits. Triton opens its metrics service after the HTTP one, so HTTP readiness alone
        let a scrape right after it be refused (seen in CI)."""
        urls = (f"http://{self.http_url}/v2/health/ready", f"http://{self.metrics_url}/metrics")
        wait_ready(urls, lambda: self.process is not None and self.process.poll() is None,
                   lambda: exited_error("tritonserver", self.log_file,
                                        self.process.returncode if self.process else None), timeout_s)

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM (Triton drains), then SIGKILL of the process group after the drain budget plus teardown."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        if timeout_s is None:
            timeout_s = float(self.stop_timing.exit_timeout_s + TEARDOWN_S)
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()

    def __enter__(self) -> EmbeddedServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
