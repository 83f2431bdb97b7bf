"""``--annotate OUTDIR``: one MP4 per stream with the boxes drawn, one video frame per answered frame."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from clients.annotate import draw_detections
from clients.errors import ClientError
from clients.stream.sender import Answer

logger = logging.getLogger(__name__)


class AnnotatedVideos:
    """A sink: draws each answer onto its frame and encodes it (H.264 through PyAV) into ``OUTDIR/<stream>.mp4``.

    The first answered frame of a stream fixes its video size; later frames of another size (a camera that
    reconnected at another resolution) are scaled to it.
    """

    def __init__(self, folder: Path, fps: float) -> None:
        self._folder = folder
        self._fps = max(1, round(fps))
        self._writers: dict[str, tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ClientError(f"cannot create {folder}: {exc.strerror or exc}") from None

    def __call__(self, answer: Answer) -> None:
        import cv2

        image = answer.frame.image
        if image is None:
            image = cv2.imdecode(np.frombuffer(answer.jpeg, dtype=np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            raise ClientError(f"stream {answer.stream}: frame {answer.frame.index} cannot be decoded to annotate")
        with self._lock:
            container, stream = self._writers.get(answer.stream) or self._open(answer.stream, image.shape)
            if image.shape[:2] != (stream.height, stream.width):
                image = cv2.resize(image, (stream.width, stream.height))
            self._encode(stream, container, draw_detections(image, answer.result))

    def _open(self, name: str, shape: tuple[int, ...]) -> tuple[Any, Any]:
        import av

        path = self._folder / f"{name}.mp4"
        container = av.open(str(path), "w")
        stream = container.add_stream("libx264", rate=self._fps)
        stream.height, stream.width = shape[0] - shape[0] % 2, shape[1] - shape[1] % 2  # yuv420p wants even sides
        stream.pix_fmt = "yuv420p"
        self._writers[name] = (container, stream)
        logger.info("stream %s: annotated video in %s", name, path)
        return container, stream

    @staticmethod
    def _encode(stream: Any, container: Any, image: Any) -> None:
        import av

        frame = av.VideoFrame.from_ndarray(image[: stream.height, : stream.width], format="bgr24")
        for packet in stream.encode(frame):
            container.mux(packet)

    def close(self) -> None:
        """Flush the encoders and finish every file (an MP4 without its index does not play)."""
        with self._lock:
            for container, stream in self._writers.values():
                for packet in stream.encode():
                    container.mux(packet)
                container.close()
            self._writers.clear()
