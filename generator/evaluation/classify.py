"""Top-1 and top-5 accuracy of a classification build, on a labelled folder of images.

The images are laid out as Ultralytics' classification datasets are (``val/<class name>/*.jpg``): each sub-folder
of ``--images`` is named after one of the model's classes (its name in the metadata, or its index). The served
detector graph runs in-process on the serving preprocess (the centre crop), as the ensemble runs it; ``--url``
sends the same images through a running Triton too (``generator.operate.served_check.served_top_classes``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from generator.errors import GeneratorError

TOP_K = 5


@dataclass(frozen=True)
class LabelledImages:
    images: list[bytes]
    labels: np.ndarray  # int64 [N], the class index of each image
    names: list[str]  # the files, relative to the folder, for the report


@dataclass(frozen=True)
class Accuracy:
    images: int
    top1: float
    top5: float

    def line(self, where: str) -> str:
        return f"{where}: top-1 {self.top1:.4f}, top-5 {self.top5:.4f} on {self.images} images"


def class_folders(root: Path, class_names: Sequence[str]) -> LabelledImages:
    """The images under ``root``'s class folders, each labelled with its folder's class; an unknown folder name
    or an empty set is refused in one line."""
    from generator.evaluation.gate import IMAGE_SUFFIXES

    if not root.is_dir():
        raise GeneratorError(f"--images {root} is not a folder (a classifier is validated on <class name>/ folders)")
    index = {name: i for i, name in enumerate(class_names)} | {str(i): i for i in range(len(class_names))}
    images, labels, names = [], [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if folder.name not in index:
            raise GeneratorError(f"--images: folder '{folder.name}' names no class of the model (its classes: "
                                 f"{', '.join(class_names[:5])}{', ...' if len(class_names) > 5 else ''})")
        for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
            images.append(path.read_bytes())
            labels.append(index[folder.name])
            names.append(str(path.relative_to(root)))
    if not images:
        raise GeneratorError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in the class folders of {root}")
    return LabelledImages(images, np.asarray(labels, dtype=np.int64), names)


def accuracy(top: np.ndarray, labels: np.ndarray) -> Accuracy:
    """Top-1 and top-5 accuracy of [N, k] best-first classes (k below 5 counts what it has)."""
    hits = top[:, :TOP_K] == labels[:, None]
    return Accuracy(len(labels), float(hits[:, :1].any(axis=1).mean()), float(hits.any(axis=1).mean()))


def top_in_process(model_path: Path, images: list[bytes], size: tuple[int, int]) -> np.ndarray:
    """The served graph's [N, 5] best classes, one image at a time through the classifier's preprocess."""
    import onnxruntime as ort

    from generator.serving.batch import prepare_batch, to_float_nchw
    from generator.serving.crop import center_crop_into
    from generator.serving.tasks import top_classes

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    rows = []
    for position, data in enumerate(images):
        batch = prepare_batch([data], size, reduced_decode=False, place=center_crop_into)
        if batch.errors:
            raise GeneratorError(f"image {position}: {batch.errors[0]}")
        pixels = batch.images if feed.type == "tensor(uint8)" else to_float_nchw(batch.images)
        probabilities = session.run(None, {feed.name: pixels})[0]
        rows.append(top_classes(probabilities, TOP_K)["top_classes"][0])
    return np.stack(rows)


def report(in_process: Accuracy, served: Accuracy | None) -> bytes:
    return json.dumps({"in_process": asdict(in_process), "served": asdict(served) if served else None},
                      indent=1).encode()
