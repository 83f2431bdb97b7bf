"""Open a source and decode its video with PyAV (FFmpeg's libraries, bundled in the wheel).

PyAV rather than OpenCV's VideoCapture: options go per source (RTSP transport, timeouts) where OpenCV takes them
from one process-wide environment variable; FFmpeg's errors arrive as exceptions that name the cause (connection
refused, 404, invalid data), which is what a per-stream report needs, where VideoCapture only returns False;
every frame keeps its timestamp; and hardware decoding is one ``HWAccel`` argument (PyAV >= 14).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from clients.errors import ClientError
from clients.stream.camera_tls import CameraTls, CameraTrustError, check_camera_certificate, is_rtsps
from clients.stream.sources import SourceSpec

logger = logging.getLogger(__name__)
MAX_CORRUPT_PACKETS = 50  # in a row: past this the source is broken, not glitching, and is reopened


class SourceError(ClientError):
    """A source could not be opened or stopped delivering; the stream reopens it after a pause."""


class FatalSourceError(SourceError):
    """A source that reopening cannot fix (an unreadable file, hardware decoding that is not there)."""


@dataclass(frozen=True)
class Decoded:
    image: np.ndarray | None  # BGR
    pts_s: float | None
    jpeg: bytes | None = None


class Video(Protocol):
    """An open source: ``frames()`` yields until the source ends; errors raise ``SourceError``."""

    def frames(self, on_corrupt: Callable[[], None]) -> Iterator[Decoded]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DecodeOptions:
    rtsp_transport: Literal["tcp", "udp"] = "tcp"  # TCP: no lost packets, so no smeared frames
    open_timeout_s: float = 10.0
    read_timeout_s: float = 5.0
    hwaccel: str | None = None  # an FFmpeg device type (cuda, vaapi, qsv, ...); None decodes on the CPU
    # How much of a network stream FFmpeg reads to learn its format before the first frame. Its default, 5 s, is a
    # 5 s start (and a burst of stale frames) per connection at camera rates; the format arrives with the first
    # key frame or in the RTSP session description anyway.
    probe_s: float = 1.0
    # How an rtsps:// camera's certificate is checked before FFmpeg connects (camera_tls.py).
    camera_tls: CameraTls = field(default_factory=CameraTls)


def hwaccel_devices() -> list[str]:
    """The hardware device types this PyAV's FFmpeg was built with (not whether the device is present)."""
    from av.codec.hwaccel import hwdevices_available

    return sorted(hwdevices_available())


def _open_arguments(spec: SourceSpec, options: DecodeOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"timeout": (options.open_timeout_s, options.read_timeout_s)}
    if spec.kind == "network":
        kwargs["options"] = {"analyzeduration": str(round(options.probe_s * 1e6))}
    if spec.location.lower().startswith(("rtsp://", "rtsps://")):
        kwargs["options"]["rtsp_transport"] = options.rtsp_transport
    if spec.kind == "camera":
        kwargs["format"] = "v4l2"
    if options.hwaccel:
        from av.codec.hwaccel import HWAccel

        if options.hwaccel not in hwaccel_devices():
            raise FatalSourceError(f"hardware decoding {options.hwaccel!r} is not built into this PyAV; it offers "
                                   f"{', '.join(hwaccel_devices()) or 'none'}")
        # No silent software fallback: asked for the device, the user gets it or an error.
        kwargs["hwaccel"] = HWAccel(device_type=options.hwaccel, allow_software_fallback=False)
    return kwargs


class PyAVVideo:
    """One opened container and its first video stream."""

    def __init__(self, spec: SourceSpec, options: DecodeOptions) -> None:
        import av

        self.spec = spec
        if is_rtsps(spec.location):
            check_camera(spec, options)
        kwargs = _open_arguments(spec, options)
        try:
            self._container: Any = av.open(spec.location, **kwargs)
        except (av.FFmpegError, OSError) as exc:
            raise _classify(spec, options, "cannot open", exc) from None
        if not self._container.streams.video:
            self._container.close()
            raise FatalSourceError(f"{spec.shown} has no video stream")
        self._stream = self._container.streams.video[0]
        self._options = options

    def frames(self, on_corrupt: Callable[[], None]) -> Iterator[Decoded]:
        import av

        corrupt = 0
        try:
            for packet in self._container.demux(self._stream):
                try:
                    decoded = packet.decode()
                except av.InvalidDataError:
                    corrupt += 1
                    on_corrupt()
                    if corrupt >= MAX_CORRUPT_PACKETS:
                        raise SourceError(f"{self.spec.shown}: {corrupt} corrupt packets in a row") from None
                    continue
                corrupt = 0
                for frame in decoded:
                    yield Decoded(image=frame.to_ndarray(format="bgr24"), pts_s=frame.time)
        except (av.FFmpegError, OSError) as exc:
            raise _classify(self.spec, self._options, "lost", exc) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead network stream may raise; it is gone either way
            self._container.close()


def check_camera(spec: SourceSpec, options: DecodeOptions) -> None:
    """An rtsps:// camera's certificate, before FFmpeg (which verifies none) connects: untrusted is fatal, no
    answer is retried as any unreachable source."""
    if not options.camera_tls.verify:  # --rtsps-insecure: the CLI said so once per source
        return
    try:
        check_camera_certificate(spec.location, options.camera_tls, options.open_timeout_s)
    except CameraTrustError as exc:
        raise FatalSourceError(f"cannot open {spec.shown}: {exc}") from None
    except OSError as exc:
        raise SourceError(f"cannot open {spec.shown}: {exc.strerror or exc}") from None


def _classify(spec: SourceSpec, options: DecodeOptions, what: str, exc: BaseException) -> SourceError:
    message = f"{what} {spec.shown}: {getattr(exc, 'strerror', None) or exc}"  # FFmpeg's text, not its errno
    if options.hwaccel and what == "cannot open" and isinstance(exc, PermissionError | NotImplementedError):
        return FatalSourceError(f"{message} (hardware decoding {options.hwaccel!r} is not available here: "
                                "run without --hwaccel, or where that device and its driver are)")
    if spec.kind == "file":
        return FatalSourceError(message)
    return SourceError(message)


def open_video(spec: SourceSpec, options: DecodeOptions) -> Video:
    return PyAVVideo(spec, options)
