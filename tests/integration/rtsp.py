"""Start and stop the test RTSP server (``rtsp_server.py`` under Debian's Python) and make the videos it serves."""

from __future__ import annotations

import select
import subprocess
import time
from pathlib import Path

import numpy as np

SYSTEM_PYTHON = Path("/usr/bin/python3")
SCRIPT = Path(__file__).with_name("rtsp_server.py")
FPS = 5


def write_scene_video(path: Path, frames: int, seed: int, size: tuple[int, int] = (640, 480), fps: int = FPS) -> Path:
    """An H.264 MP4 of synthetic scenes (the shapes the demo detector knows), a key frame every second."""
    import av

    from generator.synthetic import make_scene

    rng = np.random.default_rng(seed)
    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"g": str(fps), "bf": "0"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.thread_type = "FRAME"  # one slice per frame, as most cameras send
        for _ in range(frames):
            image = np.ascontiguousarray(make_scene(rng, width, height).image[:, :, ::-1])
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


class RtspServer:
    """gst-rtsp-server in a child process; ``url(name)`` is a mount's address. ``tls``: its certificate and key
    (then rtsps:// only)."""

    def __init__(self, mounts: dict[str, Path], log: Path, tls: tuple[Path, Path] | None = None) -> None:
        self.mounts, self.log, self.tls = mounts, log, tls
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    def start(self, port: int = 0, timeout_s: float = 30.0) -> RtspServer:
        if not SYSTEM_PYTHON.exists():
            raise RuntimeError(f"{SYSTEM_PYTHON} is missing: the RTSP tests need Debian's python3 with python3-gi")
        command = [str(SYSTEM_PYTHON), str(SCRIPT), "--port", str(port)]
        for name, path in self.mounts.items():
            command += ["--mount", f"{name}={path}"]
        if self.tls is not None:
            command += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        with self.log.open("a") as log:
            self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
        line = self._process.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the RTSP server did not start (is gir1.2-gst-rtsp-server-1.0 installed? .ci/run "
                               f"installs it): {line!r}; log: {self.log.read_text()[-2000:]}")
        self.port = int(line.split()[1])
        return self

    def url(self, name: str) -> str:
        return f"{'rtsps' if self.tls else 'rtsp'}://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Gone at once (SIGKILL): a camera that loses power does not say goodbye."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def restart(self, after_s: float) -> None:
        """Come back on the same port after ``after_s`` seconds of silence."""
        port = self.port
        self.stop()
        time.sleep(after_s)
        self.start(port)
