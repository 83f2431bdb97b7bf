"""``loadtest sizing``: how many cameras at F frames/s one server takes, measured, beside the rule of thumb.

Each level runs N streams of ``clients.stream`` (the stream client users run, latest-frame-wins, one request in
flight per stream) against a running server, with frames generated here and JPEG-encoded once, so the load
generator spends its CPU on sending rather than decoding. A level passes when every stream's end-to-end p95 and drop
rate stay within the limits and no request fails. Levels double from 1 until one fails, then bisect.

The rule it is compared with: t_frame ~ t_inf + alpha and N_max ~ 1 / (t_frame x fps) x U, with t_frame the
end-to-end time of one frame measured at one stream, t_inf the detector's own time per request from Triton's
metrics, and U the utilisation target (below 1: a queue that is always busy has no room for bursts).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clients.errors import ClientError
from clients.stream.decode import Decoded
from clients.stream.runner import StreamSettings, run_streams
from clients.stream.sources import SourceSpec
from clients.stream.stats import totals

from .errors import LoadTestError, MetricsError

logger = logging.getLogger(__name__)
DEFAULT_UTILISATION = 0.7


@dataclass(frozen=True)
class Limits:
    fps: float
    p95_ms: float
    max_drop: float = 0.01

    def breaches(self, total: dict[str, Any]) -> list[str]:
        """Why a level fails (empty: it passes): the worst stream decides, and any failed request fails it."""
        reasons = []
        if total["answered"] == 0:
            reasons.append("no frame answered")
        if total["worst_p95_ms"] is not None and total["worst_p95_ms"] > self.p95_ms:
            reasons.append(f"p95 {total['worst_p95_ms']:.0f} ms > {self.p95_ms:g} ms")
        if total["worst_drop_rate"] > self.max_drop:
            reasons.append(f"drop rate {total['worst_drop_rate']:.1%} > {self.max_drop:.1%}")
        if total["failed"]:
            reasons.append(f"{total['failed']} requests failed")
        return reasons


def predicted_streams(t_frame_ms: float, fps: float, utilisation: float) -> int:
    """The rule of thumb: floor(1 / (t_frame x fps) x U)."""
    if not (t_frame_ms > 0 and fps > 0 and 0 < utilisation <= 1):
        raise LoadTestError("the formula needs t_frame > 0, fps > 0 and 0 < U <= 1")
    return math.floor(1000.0 / (t_frame_ms * fps) * utilisation + 1e-9)


def ramp(passes: Callable[[int], bool], max_streams: int, start: int = 1) -> int:
    """The largest N for which ``passes(N)`` holds, doubling from ``start`` then bisecting; 0 when ``start`` fails.

    Each N is measured once: on a noisy machine a level near the edge can pass after a larger one failed, and the
    bisection then keeps the larger result it saw pass.
    """
    good, bad, n = 0, None, max(1, start)
    while n <= max_streams:
        if passes(n):
            good = n
            if n == max_streams:
                break
            n = min(n * 2, max_streams)
        else:
            bad = n
            break
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if passes(middle):
            good = middle
        else:
            bad = middle
    return good


class GeneratedCamera:
    """A camera that sends pre-encoded JPEGs at ``fps`` forever (``clients.stream``'s Video protocol), starting at
    frame ``offset`` and ``phase_s`` seconds late."""

    def __init__(self, frames: list[bytes], fps: float, offset: int, phase_s: float = 0.0) -> None:
        self._frames, self._fps, self._offset, self._phase_s = frames, fps, offset, phase_s

    def frames(self, on_corrupt: Callable[[], None]) -> Iterator[Decoded]:
        index = 0
        while True:
            yield Decoded(image=None, pts_s=self._phase_s + index / self._fps,
                          jpeg=self._frames[(self._offset + index) % len(self._frames)])
            index += 1

    def close(self) -> None:
        return None


@dataclass
class MemoryWatch:
    """Samples the server's memory twice a second: RSS of its process tree (this machine only) and GPU memory."""

    server_pid: int | None
    interval_s: float = 0.5
    rss_peak_mb: float | None = None
    vram_peak_mb: float | None = None
    # The peaks since begin_level(): each level's own, for the memory budget (loadtest/memory_budget.py).
    level_rss_peak_mb: float | None = None
    level_vram_peak_mb: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _gpus: Any = None  # one NVML monitor for the whole watch (made on the first sample)
    _board: Any = None  # without NVML, a Jetson's tegrastats follower: the board's shared RAM is its GPU memory

    def start(self) -> MemoryWatch:
        self._thread = threading.Thread(target=self._run, daemon=True, name="sizing-memory")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        rss, vram = self.now()
        if rss is not None:
            self.rss_peak_mb = max(self.rss_peak_mb or 0.0, rss)
            self.level_rss_peak_mb = max(self.level_rss_peak_mb or 0.0, rss)
        if vram is not None:
            self.vram_peak_mb = max(self.vram_peak_mb or 0.0, vram)
            self.level_vram_peak_mb = max(self.level_vram_peak_mb or 0.0, vram)

    def now(self) -> tuple[float | None, float | None]:
        """(RSS of the server's process tree, GPU memory of those processes) in MiB; None where not measured."""
        from generator.server.gpu_metrics import GpuMonitor

        from .vram import gpu_memory_used_mb, jetson_board_memory

        if self._gpus is None:
            self._gpus = GpuMonitor()
            self._board = None if self._gpus.available else jetson_board_memory()
        pids = process_tree(self.server_pid) if self.server_pid else {}
        rss = sum(pids.values()) / 2**20 if pids else None
        if self._board is not None:
            board = self._board.ram_used_bytes()
            return rss, None if board is None else board / 2**20
        return rss, gpu_memory_used_mb(set(pids) if pids else None, self._gpus)

    @property
    def vram_source(self) -> str | None:
        """What the GPU memory figure is: NVML's per-process memory, a Jetson board's RAM, or nothing."""
        if self._gpus is None:
            self.now()
        return "nvml" if self._gpus.available else "jetson board RAM (tegrastats)" if self._board else None

    def begin_level(self) -> None:
        """Start a level's own peaks from the memory in use now."""
        self.level_rss_peak_mb, self.level_vram_peak_mb = self.now()


def process_tree(pid: int) -> dict[int, int]:
    """pid -> RSS bytes of ``pid`` and all its descendants (the Python-backend stubs); empty once it is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    found = {}
    for process in processes:
        try:
            found[process.pid] = int(process.memory_info().rss)
        except psutil.Error:
            continue
    return found


@dataclass(frozen=True)
class Target:
    url: str
    protocol: str | None
    model: str
    timeout_s: float = 5.0
    client_options: dict[str, Any] = field(default_factory=dict)
    admin_key: str | None = None


def measure(n: int, target: Target, frames: list[bytes], fps: float, warmup_s: float,
            window_s: float) -> dict[str, Any]:
    """Run ``n`` generated cameras for warm-up plus window; the window's per-stream summaries and totals."""
    specs = [SourceSpec(name=f"camera-{i + 1:03d}", location=f"generated:{i}", kind="generated") for i in range(n)]
    step = max(1, len(frames) // max(n, 1))
    # Cameras are not synchronised: their frames are spread evenly over one frame interval, as the formula assumes
    # (in step, every camera's frame would arrive in the same instant and queue behind the others).
    cameras = {spec.name: GeneratedCamera(frames, fps, i * step, i / (n * fps)) for i, spec in enumerate(specs)}
    settings = StreamSettings(url=target.url, protocol=target.protocol, model=target.model,
                              timeout_s=target.timeout_s, duration_s=warmup_s + window_s, warmup_s=warmup_s,
                              client_options=target.client_options, admin_key=target.admin_key)
    cpu_before = os.times()
    loadavg = os.getloadavg()[0]
    try:
        summaries = asyncio.run(run_streams(specs, settings, opener=lambda spec: cameras[spec.name]))
    except ClientError as exc:
        raise LoadTestError(str(exc)) from None
    used = os.times()
    cpu = (used.user + used.system - cpu_before.user - cpu_before.system) / (warmup_s + window_s) * 100.0
    total = totals(summaries)
    total["answered_fps"] = round(total["answered"] / window_s, 2)
    return {"streams": n, **total, "generator_cpu_percent": round(cpu, 1),
            "loadavg_start": round(loadavg, 2), "loadavg_end": round(os.getloadavg()[0], 2), "per_stream": summaries}


def detector_ms_per_request(before: dict[str, dict[str, float]] | None,
                            after: dict[str, dict[str, float]] | None, model: str) -> float | None:
    """t_inf: the detector step's compute time per request, from two snapshots of Triton's counters."""
    if before is None or after is None:
        return None
    name = f"{model}_detector"
    if name not in after or name not in before:
        return None
    requests = after[name]["nv_inference_request_success"] - before[name]["nv_inference_request_success"]
    infer = after[name]["nv_inference_compute_infer_duration_us"] - before[name]["nv_inference_compute_infer_duration_us"]
    return round(infer / requests / 1000.0, 2) if requests > 0 else None


def snapshot_or_none(metrics_url: str | None) -> dict[str, dict[str, float]] | None:
    if metrics_url is None:
        return None
    from .metrics import snapshot

    try:
        return snapshot(metrics_url)
    except MetricsError as exc:
        logger.warning("no Triton metrics, so no t_inf: %s", exc)
        return None


def frames_for(video: Path | None, sizes: str, count: int = 16) -> list[bytes]:
    """The JPEGs the generated cameras send: a video's first frames, or synthetic scenes at ``sizes``."""
    if video is not None:
        from .images import video_frames

        return video_frames(video, limit=150)
    from .images import parse_sizes, synthetic_images

    return synthetic_images(parse_sizes(sizes), per_size=max(1, count // len(parse_sizes(sizes))))
