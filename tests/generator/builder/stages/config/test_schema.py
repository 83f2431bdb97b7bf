"""Triton 2.51's config schema: read from its generated module as data, prepared once, offline afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, text_format

from generator.builder.stages.config.schema import (
    GENERATED,
    SchemaUnavailableError,
    model_config_class,
    prepare_schema,
    schema_file,
    serialized_descriptor,
)
from generator.errors import ServerError
from generator.server.environments import DIGEST_FILE, PERF_ANALYZER, Environment
from generator.server.ports import free_port


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


def _generated_module(descriptor: bytes) -> str:
    """What protoc writes into a ``_pb2.py``, reduced to the call the schema reader looks for."""
    return f"DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile({descriptor!r})\n"


def test_the_perf_analyzer_environment_is_read_without_the_network(tmp_path: Path) -> None:
    """Where the perf_analyzer environment already exists, its generated module is the source: no download."""
    from tritonclient.grpc import model_config_pb2

    root = PERF_ANALYZER.location(tmp_path)
    generated = Environment(root).site_packages / GENERATED
    generated.parent.mkdir(parents=True)
    generated.write_text(_generated_module(model_config_pb2.DESCRIPTOR.serialized_pb))
    (root / DIGEST_FILE).write_text(PERF_ANALYZER.digest() + "\n")
    path, source = prepare_schema(tmp_path)
    assert source == "the perf-analyzer environment" and path.parent == tmp_path / "schemas"
    assert path.read_bytes() == model_config_pb2.DESCRIPTOR.serialized_pb
    assert prepare_schema(tmp_path) == (path, None)  # made once


def test_an_unreachable_index_is_one_line_that_names_build_prepare(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """pip pointed at a dead index, with no configuration or local wheels: the schema cannot be made."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SchemaUnavailableError) as caught:
        prepare_schema(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "run `python -m generator build --prepare` where the network is" in message
    assert not (tmp_path / "schemas").exists()


@pytest.mark.network
def test_build_prepare_fetches_the_pinned_wheel_once(tmp_path: Path) -> None:
    path, source = prepare_schema(tmp_path)
    assert source == "the hash-pinned tritonclient 2.51.0 wheel"
    assert path == schema_file(tmp_path) and path.stat().st_mode & 0o777 == 0o644
    assert prepare_schema(tmp_path) == (path, None)
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(path.read_bytes())
    assert "ModelConfig" in [m.name for m in descriptor.message_type]
