"""Triton 2.51's config schema, read from its generated module as data."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2, text_format

from generator.errors import ServerError
from generator.server.schema import model_config_class, serialized_descriptor


def test_the_descriptor_is_read_without_running_the_module() -> None:
    proto = descriptor_pb2.FileDescriptorProto(name="x.proto", package="p")
    generated = f"import sys\nsys.exit(3)\nDESCRIPTOR = pool.AddSerializedFile({proto.SerializeToString()!r})\n"
    assert descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor(generated)) == proto


def test_a_module_without_one_is_refused() -> None:
    with pytest.raises(ServerError, match="no serialized file descriptor"):
        serialized_descriptor("DESCRIPTOR = None\n")


def test_the_251_schema_parses_what_2_51_knows_and_refuses_what_it_does_not() -> None:
    config = text_format.Parse('name: "x"\nmax_batch_size: 4\ninstance_group [ { kind: KIND_CPU } ]\n',
                               model_config_class()())
    assert config.max_batch_size == 4
    with pytest.raises(text_format.ParseError, match="max_inflight_requests"):
        text_format.Parse('ensemble_scheduling { max_inflight_requests: 4 }\n', model_config_class()())
