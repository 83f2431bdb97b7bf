"""Memory and request-size limits computed from the build's facts, so they cannot be guessed wrong.

Request bodies: Triton 2.51 has no HTTP body limit and none for gRPC at all (INT32_MAX), so a 512 MB
"image" is received, copied into the preprocess stub and only then rejected. The proxy in front refuses
anything larger than the largest legitimate request: a full batch of maximum-size images plus framing.

    max_request = max_batch * (max_image_bytes + PER_IMAGE_FRAMING_BYTES) + REQUEST_OVERHEAD_BYTES

/dev/shm: the Python backend moves every tensor between the server and its preprocess/NMS stubs through
shared memory; Docker's 64 MB default is too small once batches flow (triton-inference-server/server #2296). Per batch item,
the tensors a Python step receives or returns are (``step_tensor_bytes``; dtypes and dims as the
generator's config templates write them):

    IMAGE          encoded image                       max_image_bytes
    PREPROCESSED   letterboxed image                   S*S*3 uint8 (normalised in the graph, the default)
                                                       or 3*S*S*4 float32 (--normalise-in preprocess)
    LETTERBOX      placement of the image, twice       6 float32 (out of preprocess, into NMS)
    head           detector output into NMS            6*A*4 (v8 head reduced in the graph, the default)
                                                       or (4+nc)*A*4 (--no-reduce-head), A = anchors,
                                                       or max_det*6*4 (--nms-in-graph: padded rows)
    detections     padded NMS outputs and count        max_det*(4+1+1)*4 + 4

    shm = round_up_64MiB( python_model_instances * max_batch * per_item * 2 + 64 MiB )

The images count also with ``preprocess_device=gpu`` (they then travel in Triton's CUDA memory pool): the
CPU stack, which the same settings size, preprocesses on the CPU.

the first term: the Python models' instances, preprocess and NMS with ``python_instances`` each, plus on the CPU
stack (``--target embedded``) the detector's one instance, which is a Python model there too; the second 2: input and output regions live at the same time and the arena fragments; 64 MiB: the stub
control regions and Triton's own use. The same size bounds the Kubernetes ``emptyDir`` for /dev/shm.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploy.settings import Settings, build_options
from generator.serving import contract

MIB = 1024 * 1024
SHM_BASE_BYTES = 64 * MIB
SHM_ROUND_BYTES = 64 * MIB
FLOAT32_BYTES = 4
# Per image in a request: Triton's 4-byte BYTES length prefix, plus on gRPC the protobuf tag and length
# varint of the raw input (at most 6 bytes); rounded up.
PER_IMAGE_FRAMING_BYTES = 16
# Per request: the JSON inference header (HTTP) or the protobuf message around the tensor and gRPC's
# 5-byte message prefix: names, shape, datatype, parameters. They take a few hundred bytes.
REQUEST_OVERHEAD_BYTES = 64 * 1024
_STRIDES = (8, 16, 32)
# Box (4), score and class: one row of the reduced v8 head (per anchor) or of the graph's NMS output
# (per detection).
_ROW = 6


@dataclass(frozen=True)
class ShmBreakdown:
    """The terms of the /dev/shm formula, kept so docs and tests can show the arithmetic."""

    tensors: dict[str, int]  # bytes per batch item, by tensor
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


def step_tensor_bytes(settings: Settings) -> dict[str, int]:
    """Bytes per batch item of every tensor that crosses a Python step's shared memory."""
    size = settings.input_size
    anchors = anchor_count(size)
    in_graph = settings.normalise_in == "graph"
    head_rows = _ROW if settings.reduce_head else 4 + settings.num_classes
    head = settings.max_detections * _ROW if settings.nms_in_graph else head_rows * anchors
    return {
        contract.IMAGE: settings.max_image_bytes,
        contract.PREPROCESSED: size * size * 3 * (1 if in_graph else FLOAT32_BYTES),
        contract.LETTERBOX: 2 * len(contract.LETTERBOX_FIELDS) * FLOAT32_BYTES,
        "head": head * FLOAT32_BYTES,
        "detections": settings.max_detections * (4 + 1 + 1) * FLOAT32_BYTES + FLOAT32_BYTES,
    }


def python_model_instances(settings: Settings, gpu: bool = True) -> int:
    """Instances of Python-backend models: preprocess and NMS, and on the CPU stack the embedded detector too."""
    pre, detector, nms = build_options(settings, "tensorrt" if gpu else "embedded").instance_counts
    return pre + nms + (0 if gpu else detector)


def shm_breakdown(settings: Settings, gpu: bool = True) -> ShmBreakdown:
    """Apply the module docstring's formula to ``settings``, for the GPU stack or the CPU stack."""
    tensors = step_tensor_bytes(settings)
    per_item = sum(tensors.values())
    instances = python_model_instances(settings, gpu)
    needed = instances * settings.max_batch * per_item * 2 + SHM_BASE_BYTES
    total = -(-needed // SHM_ROUND_BYTES) * SHM_ROUND_BYTES
    return ShmBreakdown(tensors, per_item, instances, settings.max_batch, total)


def shm_size_bytes(settings: Settings, gpu: bool = True) -> int:
    return shm_breakdown(settings, gpu).total_bytes


def max_request_bytes(settings: Settings) -> int:
    """Largest legitimate inference request, on either protocol: the proxy's body limit.

    Also Triton's ``--http-max-input-size`` (2.59+), so both layers agree on what is too large.
    """
    return settings.max_batch * (settings.max_image_bytes + PER_IMAGE_FRAMING_BYTES) + REQUEST_OVERHEAD_BYTES


def pod_memory_limit_mib(settings: Settings) -> int:
    """Container memory limit: a memory-backed emptyDir for /dev/shm counts against it."""
    return settings.memory_request_mib + shm_size_bytes(settings, settings.kubernetes_stack == "gpu") // MIB
