"""The one way a Triton request for the ensemble is built: clients, Locust users and the bench use it.

``module`` is the tritonclient module of the protocol in use (``tritonclient.grpc``, ``tritonclient.http``
or their ``aio`` variants): they share the ``InferInput``/``InferRequestedOutput`` API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from generator.serving.contract import IMAGE, IMAGE_DATATYPE, OUTPUTS


def image_batch(images: Sequence[bytes], batched: bool = True) -> np.ndarray:
    """Encoded images as the ensemble's BYTES input: [N, 1], or [N] for a model without batching."""
    array = np.empty((len(images), 1), dtype=np.object_)
    for i, data in enumerate(images):
        array[i, 0] = data
    return array if batched else array.reshape(-1)


def image_request(module: Any, images: Sequence[bytes], batched: bool = True,
                  outputs: Sequence[str] = OUTPUTS) -> tuple[list[Any], list[Any]]:
    """(inputs, requested outputs) for ``client.infer(model, inputs, outputs=...)``."""
    data = image_batch(images, batched)
    tensor = module.InferInput(IMAGE, list(data.shape), IMAGE_DATATYPE)
    tensor.set_data_from_numpy(data)
    return [tensor], [module.InferRequestedOutput(name) for name in outputs]
