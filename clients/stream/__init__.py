"""Video streams through the detection ensemble: ``python -m clients.stream SOURCE...`` and its library parts.

One reader thread per source decodes with PyAV and hands the newest frame to an asyncio sender (latest-frame-wins,
bounded); the sender JPEG-encodes each frame once and sends it with the project's ``AsyncDetectionClient``.
"""

from clients.stream.frame import Frame, encode_jpeg
from clients.stream.runner import StreamSettings, run_streams
from clients.stream.sender import Answer
from clients.stream.sources import SourceSpec, parse_source, parse_sources

__all__ = ["Answer", "Frame", "SourceSpec", "StreamSettings", "encode_jpeg", "parse_source", "parse_sources",
           "run_streams"]
