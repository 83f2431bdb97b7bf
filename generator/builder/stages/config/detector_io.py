"""The detector config's I/O, batch size and warmup sample, derived from what the backend will load.

Each target has one source of truth: the embedded detector takes what the ONNX declares (its runner cuts
and pads batches itself); the ONNX Runtime backend compares with what an ONNX Runtime session reports;
the TensorRT backend with the engine's bindings (``generator.builder.stages.tensorrt.plan_request``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from generator.builder.stages.config.model_io import ModelIO, ModelTensor
from generator.errors import ConfigError

if TYPE_CHECKING:
    from generator.builder.spec.options import BuildOptions
    from generator.model.onnx_inspect import DetectorInfo

ImageLayout = Literal["NCHW", "NHWC"]
WARMUP_FILE = "real_image"
_NUMPY_DTYPES = {"TYPE_UINT8": "uint8", "TYPE_FP32": "float32", "TYPE_FP16": "float16"}


@dataclass(frozen=True)
class ConfigTensor:
    """A config ``input``/``output``: dims as written (batch excluded when max_batch_size > 0)."""

    name: str
    data_type: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Warmup:
    """One real letterboxed image as the detector receives it, stored at ``<model>/warmup/<file>``."""

    file: str
    dims: tuple[int, ...]  # fully specified, as the config's warmup sample writes them
    data: bytes


@dataclass(frozen=True)
class DetectorIO:
    max_batch_size: int
    input: ConfigTensor
    output: ConfigTensor
    warmup: Warmup | None = None
    protos: ConfigTensor | None = None  # a segmentation head's second output, the mask prototypes

    @property
    def item_input_dims(self) -> tuple[int, ...]:
        """Dims of one image: what the preprocess step emits per batch item."""
        return self.input.dims if self.max_batch_size else self.input.dims[1:]

    @property
    def item_output_dims(self) -> tuple[int, ...]:
        """Dims of one image's head: what the NMS step receives per batch item."""
        return self.output.dims if self.max_batch_size else self.output.dims[1:]

    @property
    def item_protos_dims(self) -> tuple[int, ...]:
        """Dims of one image's mask prototypes (segmentation heads only)."""
        if self.protos is None:
            raise ConfigError("the detector has no mask prototypes output")
        return self.protos.dims if self.max_batch_size else self.protos.dims[1:]


def image_layout(options: BuildOptions) -> ImageLayout:
    """uint8 BGR NHWC when the graph normalises, float RGB NCHW when the preprocess step does."""
    return "NHWC" if options.normalise_in == "graph" else "NCHW"


def item_image_dims(layout: ImageLayout, image_size: tuple[int, int]) -> tuple[int, int, int]:
    height, width = image_size
    return (height, width, 3) if layout == "NHWC" else (3, height, width)


def warmup_image(image_size: tuple[int, int], layout: ImageLayout, data_type: str) -> bytes:
    """A real scene, letterboxed exactly as the preprocess step does (not random bytes, server #8379)."""
    import numpy as np

    from generator.serving.batch import to_float_nchw
    from generator.serving.letterbox import letterbox
    from generator.synthetic import make_scene

    if data_type not in _NUMPY_DTYPES:
        raise ConfigError(f"cannot make warmup data for a detector input of {data_type}")
    scene = make_scene(np.random.default_rng(1), 1280, 720)
    padded, _ = letterbox(np.ascontiguousarray(scene.image[..., ::-1]), image_size)  # RGB scene -> BGR
    if layout == "NHWC":
        return padded.astype(_NUMPY_DTYPES[data_type]).tobytes()
    return to_float_nchw(padded[None], np.dtype(_NUMPY_DTYPES[data_type])).tobytes()


def _shape(info_shape: tuple[int | str, ...]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in info_shape)


def declared_io(info: DetectorInfo) -> ModelIO:
    """The served graph's I/O as its ONNX declares it (symbolic dims as -1)."""
    outputs = [info.output] if info.protos is None else [info.output, info.protos]
    return ModelIO((ModelTensor(info.input.name, info.input.triton_dtype, _shape(info.input.shape)),),
                   tuple(ModelTensor(o.name, o.triton_dtype, _shape(o.shape)) for o in outputs))


def detector_io(io: ModelIO, info: DetectorInfo, options: BuildOptions) -> DetectorIO:
    """Config I/O for the embedded or ONNX Runtime detector from the model's I/O (``io``).

    Triton's ONNX Runtime backend needs a dynamic first dim for max_batch_size > 0 (onnxruntime_utils.cc
    CompareDimsSupported): a static batch-1 export is served with max_batch_size 0 and its full dims (the
    ensemble then takes one image per request), a larger static batch is refused. The embedded runner
    cuts and pads batches to a static size itself, so it always batches.
    """
    (model_input,) = io.inputs
    model_output, protos = _head_outputs(io, info)
    batch = model_input.shape[0]
    if options.target == "embedded" or batch == -1:
        max_batch = options.max_batch
    elif batch == 1:
        max_batch = 0
    else:
        raise ConfigError(
            f"the ONNX has a fixed batch of {batch}, which Triton's {options.target} backend can only run with "
            "exactly that many images; re-export with dynamic=True (or batch=1), or use --target embedded")
    warmup = None
    if options.target != "embedded":
        layout = image_layout(options)
        item = item_image_dims(layout, info.image_size)
        dims = item if max_batch else (1, *item)
        warmup = Warmup(WARMUP_FILE, dims, warmup_image(info.image_size, layout, model_input.data_type))

    def config(tensor: ModelTensor) -> ConfigTensor:
        return ConfigTensor(tensor.name, tensor.data_type, tuple(tensor.shape[1:] if max_batch else tensor.shape))

    return DetectorIO(max_batch_size=max_batch, input=config(model_input), output=config(model_output),
                      warmup=warmup, protos=config(protos) if protos else None)


def _head_outputs(io: ModelIO, info: DetectorInfo) -> tuple[ModelTensor, ModelTensor | None]:
    """The head output and, for a segmentation head, the prototypes output, by the names inspection found."""
    if info.protos is None:
        (model_output,) = io.outputs
        return model_output, None
    head, protos = io.output(info.output.name), io.output(info.protos.name)
    if head is None or protos is None or len(io.outputs) != 2:
        raise ConfigError(f"the served segmentation graph has outputs {[o.name for o in io.outputs]}; expected "
                          f"'{info.output.name}' and '{info.protos.name}'")
    return head, protos
