"""Detection clients for the Triton ensemble: gRPC or HTTP, blocking or asyncio."""

try:
    from clients._errors_map import QUEUE_TIMEOUT, busy_error, connection_failure
    from clients.async_client import AsyncDetectionClient
    from clients.contract import load_model_info
    from clients.detection import Classification, Detection, DetectionResult, ModelInfo
    from clients.endpoint import Endpoint, parse_endpoint
    from clients.errors import (
        ClientError,
        ClientTimeoutError,
        ImageSourceError,
        InferenceError,
        RestrictedApiError,
        ServerBusyError,
        ServerUnavailableError,
        TlsError,
    )
    from clients.retry import NO_RETRY, RetryPolicy
    from clients.sync_client import DetectionClient
except ModuleNotFoundError as _missing:  # python -m clients.X in the base install
    from clients._extra import exit_when_run_without_the_extra

    exit_when_run_without_the_extra(_missing)
    raise

__all__ = [
    "NO_RETRY",
    "QUEUE_TIMEOUT",
    "AsyncDetectionClient",
    "Classification",
    "ClientError",
    "ClientTimeoutError",
    "Detection",
    "DetectionClient",
    "DetectionResult",
    "Endpoint",
    "ImageSourceError",
    "InferenceError",
    "ModelInfo",
    "RestrictedApiError",
    "RetryPolicy",
    "ServerBusyError",
    "ServerUnavailableError",
    "TlsError",
    "busy_error",
    "connection_failure",
    "load_model_info",
    "parse_endpoint",
]
