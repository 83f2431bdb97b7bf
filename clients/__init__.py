"""Detection clients for the Triton ensemble: gRPC or HTTP, blocking or asyncio."""

from clients.async_client import AsyncDetectionClient
from clients.detection import Detection, DetectionResult, ModelInfo
from clients.endpoint import Endpoint, parse_endpoint
from clients.errors import (
    ClientError,
    ClientTimeoutError,
    ImageSourceError,
    InferenceError,
    ServerUnavailableError,
)
from clients.sync_client import DetectionClient

__all__ = [
    "AsyncDetectionClient",
    "ClientError",
    "ClientTimeoutError",
    "Detection",
    "DetectionClient",
    "DetectionResult",
    "Endpoint",
    "ImageSourceError",
    "InferenceError",
    "ModelInfo",
    "ServerUnavailableError",
    "parse_endpoint",
]
