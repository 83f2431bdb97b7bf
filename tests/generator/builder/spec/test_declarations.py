"""Option declarations: the parser, the manifest record and the rebuild command all come from one place."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from generator.builder.spec.declarations import (
    add_arguments,
    declared,
    from_args,
    from_record,
    to_flags,
    to_record,
)
from generator.builder.spec.options import (
    BuildOptions,
    GateOptions,
    PrecisionOptions,
    SpecError,
    TensorRTOptions,
)
from generator.cli.build import add_arguments as add_build_arguments
from generator.repository.manifest import Manifest, Thresholds, rebuild_command

CHANGED = BuildOptions(
    name="det", target="onnxruntime", precision="int8", max_batch=4, conf_threshold=0.3, image_size=(480, 640),
    reduced_decode=False, reduce_head=False, instances=(2, 3, 1), detector_threads=2,
    calibration=PrecisionOptions(calib_images=Path("calib"), calib_method="entropy", int8_exclude=("a", "b")),
    gate=GateOptions(enabled=False, max_drop_points=2.0),
    tensorrt=TensorRTOptions(version_compatible=True, hardware_compatibility="same_compute_capability"),
)


def parse(argv: list[str]) -> BuildOptions:
    parser = argparse.ArgumentParser()
    add_arguments(parser, BuildOptions)
    return from_args(BuildOptions, parser.parse_args(argv))


def test_every_option_has_one_unique_flag() -> None:
    flags = [item.declaration.flag for item in declared(BuildOptions)]
    assert len(flags) == len(set(flags)) > 30
    assert all(flag.startswith("--") for flag in flags)


def test_no_flags_give_the_defaults() -> None:
    assert parse([]) == BuildOptions()
    assert to_flags(BuildOptions()) == []


def test_the_flags_of_an_options_object_parse_back_to_it() -> None:
    words = to_flags(CHANGED)
    assert parse(words) == CHANGED
    assert "--no-reduced-decode" in words and "--no-validate" in words and "--version-compatible" in words
    assert words[words.index("--instances") + 1 : words.index("--instances") + 4] == ["2", "3", "1"]


def test_the_manifest_record_round_trips_and_rejects_unknown_keys() -> None:
    record = to_record(CHANGED)
    assert record["calibration.calib_images"] == "calib" and record["instances"] == [2, 3, 1]
    assert from_record(BuildOptions, record, SpecError) == CHANGED
    with pytest.raises(SpecError, match=r"unknown option.*calibration\.nodes"):
        from_record(BuildOptions, {**record, "calibration.nodes": []}, SpecError)


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--target", "tensorrt8"], "invalid choice: 'tensorrt8'"),
    (["--hardware-compatibility", "hopper"], "invalid choice: 'hopper'"),
    (["--max-batch", "x"], "invalid int value"),
])
def test_the_parser_refuses_unknown_values(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert fragment in capsys.readouterr().err


def test_unknown_values_are_errors_in_the_library_too() -> None:
    with pytest.raises(SpecError, match="unknown --hardware-compatibility 'hopper'"):
        TensorRTOptions(hardware_compatibility="hopper")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="unknown --calib-method 'kl'"):
        PrecisionOptions(calib_method="kl")  # type: ignore[arg-type]


def test_the_build_command_takes_every_declared_flag() -> None:
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    for item in declared(BuildOptions):
        assert item.declaration.flag in parser.format_help()


def test_rebuild_command_is_the_recorded_one_with_this_output(tmp_path: Path) -> None:
    words = ["python", "-m", "generator", "build", "--onnx", "/m/y.onnx", "--output", "/old", *to_flags(CHANGED)]
    manifest = Manifest(name="det", target="onnxruntime", precision="int8", onnx_sha256="0" * 64,
                        thresholds=Thresholds(0.3, 0.45, 100), rebuild=tuple(words))
    command = shlex.split(rebuild_command(manifest, tmp_path / "repo"))
    assert command[command.index("--output") + 1] == str(tmp_path / "repo")
    assert parse(command[8:]) == CHANGED
