"""Memory and request-size limits computed from the model shape, so they cannot be guessed wrong.

/dev/shm: the Python backend moves every tensor between the server and its preprocess/NMS stubs
through shared memory; Docker's 64 MB default is too small once batches of 640x640 images flow
(FIELD-NOTES #6). Per batch item, one execute holds at most

    encoded image                    max_image_bytes            (preprocess input)
    + letterboxed tensor             3 * S * S * 4              (preprocess output, FP32)
    + raw detector head              (4 + nc) * A * 4           (NMS input, A = sum over strides 8/16/32 of (S/stride)^2)
    + padded detections              max_det * (4 + 1 + 1) * 4 + 4  (NMS outputs + count)
    + letterbox parameters           LETTERBOX_PARAM_BYTES

    shm = round_up_64MiB( 2 * python_instances * max_batch * per_item * 2 + 64 MiB )

the first 2: two Python models (preprocess and NMS), each with ``python_instances`` instances; the
second 2: input and output regions live at the same time and the arena fragments; 64 MiB: the stub
control regions and Triton's own use. The same size bounds the Kubernetes ``emptyDir`` for /dev/shm.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploy.settings import Settings

MIB = 1024 * 1024
SHM_BASE_BYTES = 64 * MIB
SHM_ROUND_BYTES = 64 * MIB
# Padding, scale and original size as a handful of FP32 values, rounded up generously.
LETTERBOX_PARAM_BYTES = 64
# Slack for the JSON inference header in front of the binary tensor data.
HTTP_HEADER_SLACK_BYTES = 1 * MIB
_STRIDES = (8, 16, 32)


@dataclass(frozen=True)
class ShmBreakdown:
    """The terms of the /dev/shm formula, kept so docs and tests can show the arithmetic."""

    encoded_image: int
    letterboxed_tensor: int
    raw_head: int
    detections: int
    per_item: int
    python_model_instances: int
    max_batch: int
    total_bytes: int

    @property
    def total_mib(self) -> int:
        return self.total_bytes // MIB


def anchor_count(input_size: int) -> int:
    """Anchor points of a YOLOv8-style head: one per cell of the stride-8/16/32 grids."""
    return sum((input_size // stride) ** 2 for stride in _STRIDES)


def shm_breakdown(settings: Settings) -> ShmBreakdown:
    """Apply the module docstring's formula to ``settings``."""
    size = settings.input_size
    encoded = settings.max_image_bytes
    tensor = 3 * size * size * 4
    raw = (4 + settings.num_classes) * anchor_count(size) * 4
    detections = settings.max_detections * (4 + 1 + 1) * 4 + 4
    per_item = encoded + tensor + raw + detections + LETTERBOX_PARAM_BYTES
    instances = 2 * settings.python_instances
    needed = instances * settings.max_batch * per_item * 2 + SHM_BASE_BYTES
    total = -(-needed // SHM_ROUND_BYTES) * SHM_ROUND_BYTES
    return ShmBreakdown(encoded, tensor, raw, detections, per_item, instances, settings.max_batch, total)


def shm_size_bytes(settings: Settings) -> int:
    return shm_breakdown(settings).total_bytes


def http_max_input_bytes(settings: Settings) -> int:
    """Largest legitimate HTTP body: a full batch of maximum-size images plus the JSON header.

    Each BYTES element carries a 4-byte length prefix; the header slack covers those too.
    """
    return settings.max_batch * settings.max_image_bytes + HTTP_HEADER_SLACK_BYTES


def pod_memory_limit_mib(settings: Settings) -> int:
    """Container memory limit: a memory-backed emptyDir for /dev/shm counts against it."""
    return settings.memory_request_mib + shm_size_bytes(settings) // MIB
