"""Read the ensemble's contract without the restricted model-config API.

Deployments restrict the model-config group (generator/server/hardening.py), so a client cannot count on
``get_model_config``. What it needs comes from three places, best first:

- a `ModelInfo` the caller ships with the client: `load_model_info` reads the ensemble's config.pbtxt
  from the model repository (batch limit and class names), no server call at all;
- the open model-metadata API: input and output names, dtypes and shapes (so the contract is checked),
  and whether the ensemble batches (a leading -1). It carries neither the batch limit nor parameters;
- the model config with the admin token, or on a server that does not restrict it: batch limit, class names.

An unknown batch limit is learned from Triton's own answer to a request that exceeds it
("inference request batch-size must be <= 8 for 'yolo'", core: InferenceRequest::Normalize).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from clients.detection import ModelInfo, model_info_from_config
from clients.endpoint import Endpoint
from clients.errors import ClientError, InferenceError, RestrictedApiError
from clients.tasks import task_of_outputs
from generator.serving.contract import (
    ADMIN_HEADER,
    BOX_CLASSES,
    GRPC_HEADER_PREFIX,
    IMAGE,
    IMAGE_DATATYPE,
    OUTPUTS,
    TASK_OUTPUT_DATATYPES,
    TASK_OUTPUTS,
    TWO_STAGE_OUTPUT_DATATYPES,
)

logger = logging.getLogger(__name__)
_BATCH_LIMIT_RE = re.compile(r"batch-size must be <= (\d+)")


def admin_headers(protocol: str, admin_key: str | None, header: str = ADMIN_HEADER) -> dict[str, str]:
    """The request headers that open restricted APIs: HTTP sends the header, gRPC a prefixed metadata key."""
    if not admin_key:
        return {}
    return {(GRPC_HEADER_PREFIX + header if protocol == "grpc" else header): admin_key}


def info_from_metadata(name: str, metadata: Mapping[str, Any]) -> ModelInfo:
    """Check the metadata against the ensemble contract; batching is known, its limit and class names are not."""
    inputs = {t.get("name"): t for t in metadata.get("inputs", [])}
    outputs = {t.get("name"): t for t in metadata.get("outputs", [])}
    image = inputs.get(IMAGE)
    if image is None or image.get("datatype") != IMAGE_DATATYPE:
        raise ClientError(f"model {name!r} is not a detection ensemble: it has no {IMAGE_DATATYPE} input {IMAGE!r}")
    task = task_of_outputs(outputs)
    expected = TASK_OUTPUTS["classify"] if task == "classify" else OUTPUTS  # a classifier returns no detections
    wrong = [n for n in expected if (outputs.get(n) or {}).get("datatype") != TASK_OUTPUT_DATATYPES[n]]
    if wrong:
        what = "classification" if task == "classify" else "detection"
        raise ClientError(f"model {name!r} lacks the {what} output(s) {', '.join(wrong)} "
                          f"({', '.join(f'{n} {TASK_OUTPUT_DATATYPES[n]}' for n in expected)})")
    shape = [int(d) for d in image.get("shape", [])]  # gRPC metadata spells dims as strings
    if shape not in ([-1, 1], [1]):
        raise ClientError(f"model {name!r}: input {IMAGE} has shape {shape}, expected [-1, 1] or [1]")
    second_stage = (outputs.get(BOX_CLASSES) or {}).get("datatype") == TWO_STAGE_OUTPUT_DATATYPES[BOX_CLASSES]
    return ModelInfo(name=name, max_batch_size=None if shape[0] == -1 else 0, class_names=(), task=task,
                     second_stage=second_stage)


def info_from_answers(name: str, metadata: Mapping[str, Any], config: Mapping[str, Any] | None) -> ModelInfo:
    """The contract checked against the metadata, with batch limit and class names from the config if read."""
    info = info_from_metadata(name, metadata)
    return info if config is None else model_info_from_config(name, config)


def without_config(endpoint: Endpoint, name: str, exc: RestrictedApiError, admin_key: str | None) -> None:
    """A restricted config is fine without a key (the metadata is enough); with a key, the key is wrong."""
    if admin_key:
        raise exc
    logger.debug("%s restricts the model config of %r: class names unknown, batch limit learned from the "
                "server (pass admin_key= or model_info= to have both)", endpoint, name)


def learn_batch_limit(info: ModelInfo, exc: InferenceError) -> ModelInfo | None:
    """`info` with the limit Triton just named, when the request was refused for its batch size."""
    match = _BATCH_LIMIT_RE.search(str(exc))
    if info.max_batch_size is not None or match is None or int(match.group(1)) < 1:
        return None
    return replace(info, max_batch_size=int(match.group(1)))


def load_model_info(path: str | Path) -> ModelInfo:
    """The contract from an ensemble's config.pbtxt (the file, or the model folder holding it)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    file = Path(path)
    if file.is_dir():
        file = file / "config.pbtxt"
    try:
        config = text_format.Parse(file.read_text(), model_config_pb2.ModelConfig())
    except OSError as exc:
        raise ClientError(f"cannot read the model config {str(file)!r}: {exc.strerror or exc}") from None
    except text_format.ParseError as exc:
        raise ClientError(f"{str(file)!r} is not a Triton model config: {exc}") from None
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return model_info_from_config(config.name or file.parent.name, as_json)
