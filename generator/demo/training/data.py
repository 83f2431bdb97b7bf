"""Training data for the demo detector: fresh synthetic scenes through the production preprocessing.

Every scene is drawn by ``generator.synthetic``, JPEG-encoded (most of the time) and decoded and letterboxed
by ``generator.serving`` -- exactly what the served ensemble does -- so the model learns the input it will
be given. Batch ``i`` of a run is a pure function of ``(seed, i)``: any number of worker processes, on any
machine, produce the same batches in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from generator.synthetic import encode, make_scene

# (width, height, weight). The evaluation sizes (640x480, 1280x720, 480x640) dominate; 960x540 letterboxes
# to the same 640x360 input as 1280x720 at half the drawing cost; 800x600 and 320x320 keep other scales.
SIZES = ((640, 480, 4), (480, 640, 3), (960, 540, 3), (1280, 720, 2), (800, 600, 1), (320, 320, 1))
MAX_GT = 8  # generator.synthetic draws at most 8 shapes per scene by default, as the held-out sets do
JPEG_SHARE = 0.8  # the rest is letterboxed from the raw pixels (as PNG or BMP input would be)


def sample(rng: np.random.Generator, imgsz: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One example: (3 x imgsz x imgsz uint8 RGB, xyxy boxes [K, 4] in input pixels, classes [K])."""
    from generator.serving.batch import prepare_batch
    from generator.serving.letterbox import letterbox

    weights = np.array([s[2] for s in SIZES], dtype=np.float64)
    width, height, _ = SIZES[rng.choice(len(SIZES), p=weights / weights.sum())]
    scene = make_scene(rng, width, height, max_objects=MAX_GT)
    target = (imgsz, imgsz)
    if rng.random() < JPEG_SHARE:  # the served path: JPEG bytes -> production (reduced) decode + letterbox
        batch = prepare_batch([encode(scene.image, ".jpg", int(rng.integers(70, 96)))], target)
        image = batch.images[0][..., ::-1]  # BGR -> RGB
        pad_x, pad_y, gain_x, gain_y = (float(v) for v in batch.letterbox[0, :4])
    else:
        image, lb = letterbox(scene.image, target)
        pad_x, pad_y, gain_x, gain_y = lb.pad_x, lb.pad_y, lb.gain_x, lb.gain_y
    boxes = scene.boxes * np.array([gain_x, gain_y, gain_x, gain_y], dtype=np.float32)
    boxes += np.array([pad_x, pad_y, pad_x, pad_y], dtype=np.float32)
    return np.ascontiguousarray(image.transpose(2, 0, 1)), boxes.astype(np.float32), scene.classes


def make_batch(seed: int, index: int, batch_size: int, imgsz: int) -> dict[str, torch.Tensor]:
    """Batch ``index`` of the stream ``seed``: images uint8 [B,3,S,S], boxes [B,M,4], classes [B,M] (-1: none)."""
    images = np.empty((batch_size, 3, imgsz, imgsz), dtype=np.uint8)
    boxes = np.zeros((batch_size, MAX_GT, 4), dtype=np.float32)
    classes = np.full((batch_size, MAX_GT), -1, dtype=np.int64)
    for j in range(batch_size):
        rng = np.random.default_rng([seed, index, j])
        images[j], b, c = sample(rng, imgsz)
        boxes[j, : len(b)], classes[j, : len(c)] = b, c
    return {
        "images": torch.from_numpy(images),
        "boxes": torch.from_numpy(boxes),
        "classes": torch.from_numpy(classes),
    }


class SceneBatches(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Map-style: item ``i`` is a whole batch, so each worker process builds batches independently."""

    def __init__(self, seed: int, batch_size: int, imgsz: int, count: int) -> None:
        self.seed, self.batch_size, self.imgsz, self.count = seed, batch_size, imgsz, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return make_batch(self.seed, index, self.batch_size, self.imgsz)


def _quiet_worker(_: int) -> None:
    import cv2

    # One process per core: threads inside OpenCV or torch would only fight over the same cores.
    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def batches(
    seed: int, batch_size: int, imgsz: int, workers: int, pin_memory: bool = False, count: int = 10**9
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield batches 0, 1, 2, ... of the stream ``seed`` in order (``workers`` 0: in this process)."""
    dataset = SceneBatches(seed, batch_size, imgsz, count)
    if workers == 0:
        for i in range(count):
            yield dataset[i]
        return
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,  # items are already batches
        shuffle=False,
        num_workers=workers,
        pin_memory=pin_memory,
        prefetch_factor=4,
        worker_init_fn=_quiet_worker,
        persistent_workers=False,
        # Forking a process that holds OpenCV, gRPC or CUDA state can hang the child; spawned workers start
        # clean (a few seconds each, once).
        multiprocessing_context="spawn",
    )
    yield from loader


def dihedral(
    images: torch.Tensor, boxes: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply one of the 8 flips/transposes of the square, chosen per image, to images [B,C,S,S] and boxes.

    Every class is symmetric under them as a class (shapes are drawn at random rotations), and a transposed
    letterboxed landscape image is a letterboxed portrait one, so reused scenes come back as new views.
    """
    size = images.shape[-1]
    choice = torch.randint(0, 8, (images.shape[0],), generator=generator, device=generator.device)
    choice = choice.to(images.device)
    hflip, vflip, swap = (choice & 1).bool(), (choice & 2).bool(), (choice & 4).bool()
    x1, y1, x2, y2 = boxes.unbind(-1)
    h, v = hflip[:, None], vflip[:, None]
    x1, x2 = torch.where(h, size - x2, x1), torch.where(h, size - x1, x2)
    y1, y2 = torch.where(v, size - y2, y1), torch.where(v, size - y1, y2)
    s = swap[:, None]
    boxes = torch.stack(
        [torch.where(s, y1, x1), torch.where(s, x1, y1), torch.where(s, y2, x2), torch.where(s, x2, y2)], -1
    )
    images = torch.where(hflip[:, None, None, None], images.flip(-1), images)
    images = torch.where(vflip[:, None, None, None], images.flip(-2), images)
    images = torch.where(swap[:, None, None, None], images.transpose(-1, -2), images)
    return images, boxes
