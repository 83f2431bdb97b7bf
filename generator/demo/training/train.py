"""Train the bundled demo detector on synthetic scenes and export it (needs the optional ``torch``).

    python -m generator.demo.training.train --out generator/demo/demo_detector.onnx

Every sample is a fresh ``generator.synthetic`` scene pushed through the production preprocessing
(JPEG encode, ``generator.pipeline`` decode + letterbox into 320x320, RGB, /255), so the model never sees
an image twice and learns exactly the input the served ensemble gives it. A background process makes the
scenes while the main process trains on one thread: the machines this runs on have two shared cores, and
one torch thread with channels-last convolutions was measured faster than two.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.demo import INPUT_SIZE
from generator.synthetic import CLASS_NAMES, encode, make_scene

# (width, height, weight): mostly the evaluation size, plus other shapes so any aspect ratio works.
_SIZES = ((640, 480, 5), (1280, 720, 1), (320, 320, 2), (480, 640, 1), (800, 600, 1), (960, 540, 1))
_TRAIN_SEED = 20240601  # evaluation uses other seeds (see evaluate.py)
_MAX_GT = 8


def sample(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One training example: (3x320x320 uint8 RGB, boxes [K,4] in input pixels, classes [K])."""
    from generator.pipeline.batch import prepare_batch
    from generator.pipeline.letterbox import letterbox

    weights = np.array([s[2] for s in _SIZES], dtype=np.float64)
    width, height, _ = _SIZES[rng.choice(len(_SIZES), p=weights / weights.sum())]
    scene = make_scene(rng, width, height, max_objects=_MAX_GT)
    target = (INPUT_SIZE, INPUT_SIZE)
    if rng.random() < 0.8:  # the served path: JPEG bytes -> production decode + letterbox (BGR)
        batch = prepare_batch([encode(scene.image, ".jpg", int(rng.integers(70, 96)))], target)
        image = batch.images[0][..., ::-1]
        pad_x, pad_y, gain_x, gain_y = (float(v) for v in batch.letterbox[0, :4])
    else:
        image, lb = letterbox(scene.image, target)
        pad_x, pad_y, gain_x, gain_y = lb.pad_x, lb.pad_y, lb.gain_x, lb.gain_y
    boxes = scene.boxes * np.array([gain_x, gain_y, gain_x, gain_y], dtype=np.float32)
    boxes += np.array([pad_x, pad_y, pad_x, pad_y], dtype=np.float32)
    if rng.random() < 0.5:  # every class is mirror-symmetric as a class, so flips are free data
        image = image[:, ::-1]
        boxes = np.stack([INPUT_SIZE - boxes[:, 2], boxes[:, 1], INPUT_SIZE - boxes[:, 0], boxes[:, 3]], 1)
    return np.ascontiguousarray(image.transpose(2, 0, 1)), boxes.astype(np.float32), scene.classes


def _batches(seed: int, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    while True:
        images = np.empty((batch_size, 3, INPUT_SIZE, INPUT_SIZE), dtype=np.uint8)
        boxes = np.zeros((batch_size, _MAX_GT, 4), dtype=np.float32)
        classes = np.full((batch_size, _MAX_GT), -1, dtype=np.int64)
        for i in range(batch_size):
            images[i], b, c = sample(rng)
            boxes[i, : len(b)], classes[i, : len(c)] = b, c
        yield images, boxes, classes, classes >= 0


def _producer(seed: int, batch_size: int, queue: object) -> None:
    for item in _batches(seed, batch_size):
        queue.put(item)  # type: ignore[attr-defined]


def _param_groups(model: object) -> list[dict[str, object]]:
    import torch

    assert isinstance(model, torch.nn.Module)
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}]


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2400
    batch_size: int = 16
    lr: float = 2e-3
    seed: int = _TRAIN_SEED
    ema_decay: float = 0.999
    init: Path | None = None  # continue from this checkpoint's weights (a second, fine-tuning stage)
    log_every: int = 100
    snapshot_every: int = 0


def train(out: Path, cfg: TrainConfig) -> Path:
    import copy
    import multiprocessing as mp

    import torch

    from generator.demo.training.export import export_onnx
    from generator.demo.training.loss import DetectionLoss
    from generator.demo.training.model import TinyYolo

    steps, batch_size, lr, seed, log_every, snapshot_every = (
        cfg.steps,
        cfg.batch_size,
        cfg.lr,
        cfg.seed,
        cfg.log_every,
        cfg.snapshot_every,
    )
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = TinyYolo(len(CLASS_NAMES), INPUT_SIZE)
    if cfg.init is not None:
        model.load_state_dict(torch.load(cfg.init, map_location="cpu", weights_only=True)["model"])
    for p in model.parameters():  # channels-last convolutions are ~2x faster on CPU
        if p.ndim == 4:
            p.data = p.data.contiguous(memory_format=torch.channels_last)
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    criterion = DetectionLoss()
    optimizer = torch.optim.AdamW(_param_groups(model), lr=lr, betas=(0.9, 0.999))
    warmup = min(200, steps // 10)

    def lr_at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))

    ctx = mp.get_context("spawn")
    queue = ctx.Queue(maxsize=6)
    worker = ctx.Process(target=_producer, args=(seed, batch_size, queue), daemon=True)
    worker.start()
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters; {steps} steps of {batch_size} images", flush=True)
    start = time.perf_counter()
    try:
        for step in range(steps):
            images, boxes, classes, valid = queue.get(timeout=600)
            x = torch.from_numpy(images).float().div_(255).contiguous(memory_format=torch.channels_last)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
            model.train()
            dist, logits = model(x)
            loss, parts = criterion(
                dist,
                logits,
                model.points,
                model.strides,
                torch.from_numpy(boxes),
                torch.from_numpy(classes),
                torch.from_numpy(valid),
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            decay = cfg.ema_decay * (1 - math.exp(-(step + 1) / 300))
            with torch.no_grad():
                for e, m in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
                    if e.dtype.is_floating_point:
                        e.mul_(decay).add_(m.detach(), alpha=1 - decay)
                    else:
                        e.copy_(m)
            if step % log_every == 0 or step == steps - 1:
                elapsed = time.perf_counter() - start
                detail = " ".join(f"{k} {v:.3f}" for k, v in parts.items())
                print(
                    f"step {step:5d} loss {float(loss.detach()):.3f} ({detail}) lr {lr_at(step):.2e} {elapsed:.0f}s",
                    flush=True,
                )
            if snapshot_every and (step + 1) % snapshot_every == 0 and step + 1 < steps:
                # Intermediate exports let a long run be judged with evaluate.py while it continues.
                out.parent.mkdir(parents=True, exist_ok=True)
                export_onnx(copy.deepcopy(ema), out.with_name(f"{out.stem}.step{step + 1}.onnx"))
    finally:
        worker.terminate()
        worker.join()
    out.parent.mkdir(parents=True, exist_ok=True)
    ckpt = out.with_suffix(".pt")
    torch.save({"model": ema.state_dict(), "raw": model.state_dict(), "config": repr(cfg)}, ckpt)
    print(f"trained in {time.perf_counter() - start:.0f}s; EMA weights saved to {ckpt}", flush=True)
    return export_onnx(ema, out)


def export_checkpoint(checkpoint: Path, out: Path) -> Path:
    import torch

    from generator.demo.training.export import export_onnx
    from generator.demo.training.model import TinyYolo

    model = TinyYolo(len(CLASS_NAMES), INPUT_SIZE)
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["model"])
    return export_onnx(model, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m generator.demo.training.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="ONNX file to write")
    defaults = TrainConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--ema-decay", type=float, default=defaults.ema_decay)
    parser.add_argument(
        "--init", type=Path, help="start from this checkpoint's (EMA) weights: a fine-tuning stage"
    )
    parser.add_argument("--log-every", type=int, default=defaults.log_every)
    parser.add_argument("--from-checkpoint", type=Path, help="skip training: export this .pt (EMA weights)")
    parser.add_argument("--snapshot-every", type=int, default=0, help="also export every N steps (0: never)")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("error: training needs torch: pip install 'triton-detection-ensemble[train]'", file=sys.stderr)
        return 1
    if args.from_checkpoint:
        path = export_checkpoint(args.from_checkpoint, args.out)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
        return 0
    cfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        ema_decay=args.ema_decay,
        init=args.init,
        log_every=args.log_every,
        snapshot_every=args.snapshot_every,
    )
    path = train(args.out, cfg)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
