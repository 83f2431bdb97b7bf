"""Export the demo model to an ONNX file laid out exactly like an Ultralytics YOLOv8 detect export.

Same input/output names, a dynamic ``batch`` axis, opset 17, and ``metadata_props`` written the way
Ultralytics' exporter writes them (``str()`` of each Python value), so every tool that understands a real
Ultralytics export -- including ours -- reads this one the same way.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from generator import __version__
from generator.demo.training.model import STRIDES, TinyYolo
from generator.synthetic import CLASS_NAMES

OPSET = 17


def metadata(imgsz: int) -> dict[str, str]:
    values: dict[str, object] = {
        "description": "Tiny YOLOv8-style demo detector trained on generator.synthetic shapes",
        "author": "triton-detection-ensemble",
        "date": datetime.now().isoformat(),
        "version": __version__,
        "license": "Apache-2.0",
        "docs": "generator/demo/README.md",
        "stride": max(STRIDES),
        "task": "detect",
        "batch": 1,
        "imgsz": [imgsz, imgsz],
        "names": dict(enumerate(CLASS_NAMES)),
        "args": {"batch": 1, "dynamic": True, "half": False, "nms": False, "opset": OPSET, "simplify": False},
        "channels": 3,
    }
    return {k: str(v) for k, v in values.items()}


def export_onnx(model: TinyYolo, path: Path) -> Path:
    """Write ``model`` to ``path``, check it, and prove ONNX Runtime agrees with torch."""
    import onnx
    import onnxruntime as ort

    model = model.eval().float()
    model.export = True
    dummy = torch.zeros(1, 3, model.imgsz, model.imgsz)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (dummy,),
        str(path),
        opset_version=OPSET,
        input_names=["images"],
        output_names=["output0"],
        dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
        do_constant_folding=True,
        dynamo=False,
    )
    proto = onnx.load(str(path))
    # The tracer leaves the class axis symbolic ("Transposeoutput0_dim_1"); Ultralytics exports carry the
    # concrete [batch, 4 + nc, anchors], which tools rely on to recognise the head.
    out_dims = proto.graph.output[0].type.tensor_type.shape.dim
    for dim, size in zip(out_dims[1:], (4 + model.nc, int(model.points.shape[0])), strict=True):
        dim.Clear()
        dim.dim_value = size
    for key, value in metadata(model.imgsz).items():
        prop = proto.metadata_props.add()
        prop.key, prop.value = key, value
    proto.producer_name = "pytorch"
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))

    gen = torch.Generator().manual_seed(0)
    sample = torch.rand(3, 3, model.imgsz, model.imgsz, generator=gen)
    with torch.no_grad():
        expected = model(sample).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["output0"], {"images": sample.numpy()})[0]
    model.export = False
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-3, atol=1e-3):
        raise RuntimeError(
            f"ONNX Runtime disagrees with torch: max abs diff {np.abs(got - expected).max():.3g}"
        )
    return path
