"""libnvinfer is found where a process would load it and asked for its version, without TensorRT's Python."""

from __future__ import annotations

import os

import pytest

from generator.repository.libnvinfer import (
    candidate_paths,
    decode_version,
    find_tensorrt_library,
    library_version,
)
from tests.generator.builder.stages.tensorrt.fake_libnvinfer import build_libnvinfer


@pytest.mark.parametrize(("value", "version"), [
    (100300, "10.3.0"),  # TensorRT 10: major*10000 + minor*100 + patch (NvInferRuntimeBase.h)
    (101301, "10.13.1"),
    (110100, "11.1.0"),
    (8601, "8.6.1"),  # TensorRT 8: major*1000 + minor*100 + patch
    (8503, "8.5.3"),
])
def test_recorded_version_values_decode(value: int, version: str) -> None:
    assert decode_version(value) == version


def test_a_real_library_on_ld_library_path_answers(tmp_path) -> None:
    library = build_libnvinfer(tmp_path / "lib", 100300)
    assert library_version(library) == "10.3.0"
    found = find_tensorrt_library({"LD_LIBRARY_PATH": f"/nonexistent{os.pathsep}{library.parent}"}, standard=())
    assert found is not None and found.path == library and found.version == "10.3.0"


def test_search_order_and_what_is_not_libnvinfer(tmp_path) -> None:
    first = build_libnvinfer(tmp_path / "first", 101301)
    standard = build_libnvinfer(tmp_path / "standard", 100300)
    build_libnvinfer(tmp_path / "first", 100300, soname="libnvinfer_plugin.so.10")  # not the runtime
    (tmp_path / "first" / "libnvinfer.so.9").write_bytes(b"not a library")
    paths = candidate_paths({"LD_LIBRARY_PATH": str(first.parent)}, standard=(str(standard.parent),))
    assert paths.index(first) < paths.index(standard)
    assert not any(p.name.startswith("libnvinfer_plugin") for p in paths)
    found = find_tensorrt_library({"LD_LIBRARY_PATH": str(first.parent)}, standard=(str(standard.parent),))
    assert found is not None and found.path == first and found.version == "10.13.1"


def test_the_standard_location_is_searched_and_broken_files_are_skipped(tmp_path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "libnvinfer.so.11").write_bytes(b"\x7fELF truncated")
    standard = build_libnvinfer(tmp_path / "standard", 110100, soname="libnvinfer.so.11")
    found = find_tensorrt_library({"LD_LIBRARY_PATH": str(tmp_path / "broken")}, standard=(str(standard.parent),))
    assert found is not None and found.version == "11.1.0"


def test_folders_without_the_library_add_nothing(tmp_path) -> None:
    (tmp_path / "libnvinfer_lean.so.10").write_bytes(b"")
    # Only the dynamic linker's cache is left to answer (nothing on a machine without TensorRT).
    assert find_tensorrt_library({"LD_LIBRARY_PATH": str(tmp_path)}, standard=(str(tmp_path),)) == \
        find_tensorrt_library({}, standard=())
    assert candidate_paths({"LD_LIBRARY_PATH": str(tmp_path)}, standard=(str(tmp_path),)) == \
        candidate_paths({}, standard=())
