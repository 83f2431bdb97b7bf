"""Optimization-profile shapes for the detector input, validated before any GPU work.

Triton's ``max_batch_size`` must equal the profile's maximum batch, and the profile must start at
batch 1 because the dynamic batcher sends any size up to the maximum (server #7056, #4384).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from generator.builder.stages.tensorrt.errors import ProfileError

OnnxDim = int | str | None  # an ONNX dim: a size, a symbolic name, or unknown


@dataclass(frozen=True)
class DimRange:
    """min <= opt <= max for one dynamic dimension."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ProfileError(f"need 1 <= min <= opt <= max, got {self.min}/{self.opt}/{self.max}")

    @classmethod
    def fixed(cls, value: int) -> DimRange:
        return cls(value, value, value)


@dataclass(frozen=True)
class ShapeProfile:
    """Min/opt/max shapes of one input in one optimization profile."""

    input_name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (len(self.min) == len(self.opt) == len(self.max)) or not self.min:
            raise ProfileError(f"profile for {self.input_name!r} has shapes of different ranks")
        for lo, mid, hi in zip(self.min, self.opt, self.max, strict=True):
            if not 1 <= lo <= mid <= hi:
                raise ProfileError(
                    f"profile for {self.input_name!r} needs 1 <= min <= opt <= max per dim, "
                    f"got {self.min} / {self.opt} / {self.max}"
                )

    @property
    def max_batch(self) -> int:
        return self.max[0]

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input_name, "min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShapeProfile:
        unknown = set(data) - {"input", "min", "opt", "max"}
        if unknown:
            raise ProfileError(f"unknown profile key(s): {', '.join(sorted(unknown))}")
        try:
            return cls(
                str(data["input"]),
                tuple(int(v) for v in data["min"]),
                tuple(int(v) for v in data["opt"]),
                tuple(int(v) for v in data["max"]),
            )
        except KeyError as exc:
            raise ProfileError(f"profile is missing {exc.args[0]!r}") from exc


ImageLayout = Literal["NCHW", "NHWC"]
# Where batch, channels, height and width sit in each layout.
_AXES: dict[str, tuple[int, int, int, int]] = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 3, 1, 2)}


def detector_profile(
    input_name: str,
    onnx_shape: Sequence[OnnxDim],
    max_batch: int,
    opt_batch: int | None = None,
    height: int | DimRange | None = None,
    width: int | DimRange | None = None,
    stride: int = 32,
    layout: ImageLayout = "NCHW",
) -> ShapeProfile:
    """The profile for an image input in ``layout`` (NCHW float from an export, NHWC uint8 when served).

    The batch range is always 1..``max_batch`` (opt defaults to ``max_batch``: under load the
    dynamic batcher fills batches). A dynamic height/width needs a size or range from the user;
    a fixed one must not be contradicted. User-given sizes must be multiples of ``stride``.
    """
    if len(onnx_shape) != 4:
        raise ProfileError(
            f"input {input_name!r} has rank {len(onnx_shape)}; a detector input is {' x '.join(layout)}"
        )
    if max_batch < 1:
        raise ProfileError(f"--max-batch must be >= 1, got {max_batch}")
    opt = max_batch if opt_batch is None else opt_batch
    if not 1 <= opt <= max_batch:
        raise ProfileError(f"--opt-batch must be between 1 and --max-batch ({max_batch}), got {opt}")

    axes = _AXES[layout]
    batch_dim, channel_dim, h_dim, w_dim = (_size(onnx_shape[axis]) for axis in axes)
    if batch_dim is not None and batch_dim != max_batch:
        fix = "re-export the ONNX with a dynamic batch (Ultralytics: dynamic=True)"
        raise ProfileError(
            f"the ONNX input {input_name!r} has a fixed batch of {batch_dim} but --max-batch is {max_batch}; "
            f"{fix} or use --max-batch {batch_dim}"
        )
    if channel_dim is None:
        raise ProfileError(f"input {input_name!r} has a dynamic channel dim; export it with 3 channels")
    batch = DimRange(1, opt, max_batch) if batch_dim is None else DimRange.fixed(max_batch)
    ranges = (batch, DimRange.fixed(channel_dim), _spatial(input_name, "height", h_dim, height, stride),
              _spatial(input_name, "width", w_dim, width, stride))
    ordered = [ranges[axes.index(position)] for position in range(4)]
    return ShapeProfile(
        input_name,
        tuple(r.min for r in ordered),
        tuple(r.opt for r in ordered),
        tuple(r.max for r in ordered),
    )


def _size(dim: OnnxDim) -> int | None:
    """The fixed size of an ONNX dim, or None when it is dynamic (symbolic, unknown, -1 or 0)."""
    return dim if isinstance(dim, int) and dim > 0 else None


def _spatial(
    name: str, label: str, size: int | None, requested: int | DimRange | None, stride: int
) -> DimRange:
    if size is not None:
        if requested is not None and requested != size and requested != DimRange.fixed(size):
            raise ProfileError(
                f"the ONNX input {name!r} has a fixed {label} of {size}; it cannot be built for {requested}"
            )
        return DimRange.fixed(size)
    if requested is None:
        raise ProfileError(
            f"the ONNX input {name!r} has a dynamic {label}; give it a size (e.g. --imgsz 640)"
        )
    wanted = DimRange.fixed(requested) if isinstance(requested, int) else requested
    for value in (wanted.min, wanted.opt, wanted.max):
        if value % stride:
            raise ProfileError(f"{label} {value} is not a multiple of the model stride {stride}")
    return wanted
