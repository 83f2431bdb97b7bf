"""Triton 2.51's own ``model_config.proto``, so that configs are parsed as the embedded server parses them.

The project's tritonclient (2.73) carries a newer schema: a field Triton 2.51 does not know would pass its parse
and then fail ``ReadTextProto`` when the server loads the model. The 2.51 schema comes from the tritonclient 2.51
wheel pinned by hash in ``locks/perf-analyzer.txt`` (the environment perf_analyzer runs from): the serialized
file descriptor in its ``model_config_pb2.py`` is read as data and loaded into a private descriptor pool, beside
the 2.73 schema in the default one.
"""

from __future__ import annotations

import ast
from functools import lru_cache

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from generator.errors import ServerError
from generator.server.embedded import TRITON_VERSION, cache_root
from generator.server.environments import PERF_ANALYZER, ensure_environment

MESSAGE = "inference.ModelConfig"


@lru_cache(maxsize=1)
def model_config_class() -> type[message.Message]:
    """The ``ModelConfig`` message class of Triton 2.51 (its environment is made on first use)."""
    environment = ensure_environment(PERF_ANALYZER, cache_root())
    source = environment.site_packages / "tritonclient" / "grpc" / "model_config_pb2.py"
    if not source.is_file():
        raise ServerError(f"{source} is missing: the tritonclient {TRITON_VERSION} environment is incomplete")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor(source.read_text())))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(MESSAGE))


def serialized_descriptor(generated: str) -> bytes:
    """The bytes protoc put into ``AddSerializedFile(b'...')`` of a generated ``_pb2.py``, without running it."""
    for node in ast.walk(ast.parse(generated)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args):
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise ServerError("no serialized file descriptor (AddSerializedFile) in the generated model_config_pb2.py")
