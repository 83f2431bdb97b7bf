"""perf_analyzer ``--input-data`` JSON that sends real encoded images to the ensemble's BYTES ``IMAGE`` input.

perf_analyzer's JSON takes binary tensor content as ``{"b64": ...}``; for a STRING/BYTES tensor that content
is Triton's wire form of the elements: each one a 4-byte little-endian length followed by its bytes
(perf_analyzer #105: handing it the bare JPEG fails). ``"shape": [1]`` is one image per batch item, the
ensemble's non-batch dims.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from generator.serving.contract import IMAGE

from .errors import CorpusError


def bytes_tensor_content(elements: Sequence[bytes]) -> bytes:
    """Serialise BYTES elements the way Triton does: ``<u32 little-endian length><bytes>`` per element."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def input_data(images: Sequence[bytes], input_name: str = IMAGE) -> dict[str, Any]:
    """One ``data`` entry per image; perf_analyzer sends them round-robin."""
    if not images:
        raise CorpusError("no images to write into the perf_analyzer input data")
    return {
        "data": [
            {
                input_name: {
                    "content": {"b64": base64.b64encode(bytes_tensor_content([image])).decode("ascii")},
                    "shape": [1],
                }
            }
            for image in images
        ]
    }


def write_input_data(images: Sequence[bytes], path: Path, input_name: str = IMAGE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(input_data(images, input_name)))
    return path
