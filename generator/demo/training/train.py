"""Train the bundled demo detector on synthetic scenes and export it (needs the optional ``torch``).

    python -m generator.demo.training.train --out generator/demo/demo_detector.onnx --device cuda \\
        --steps auto --time-budget-s 420 --batch-size 128 --workers 15 --reuse 2

The same command trains on a CPU with ``--device cpu`` (use a small ``--steps`` there). Scenes come from
``generator.demo.training.data``: batch ``i`` is a pure function of ``(--seed, i)``, made by ``--workers``
processes through the production decode + letterbox. When the GPU outpaces the scene workers, ``--reuse R``
trains R steps per fresh batch: the other steps draw from a pool of recent batches on the device, each image
under a random flip/transpose, so the GPU is not idle and every step stays a function of the seed.

``--steps auto`` measures the step rate over the first steps and fixes the step count (printed, so the run
can be repeated with ``--steps N``) so that the cosine schedule ends inside ``--time-budget-s``; a run that
still reaches the budget stops there and exports what it has.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from generator.demo import INPUT_SIZE
from generator.synthetic import CLASS_NAMES

_TRAIN_SEED = 20240601  # evaluation uses other seeds (see generator/demo/evaluate.py)


@dataclass(frozen=True)
class TrainConfig:
    steps: int | None = None  # None: "auto", fixed from the measured rate and the time budget
    time_budget_s: float = 0.0  # 0: no wall-clock limit
    stop_at: int | None = None  # end here, inside the schedule of `steps` (repeats a run the budget stopped)
    batch_size: int = 128
    imgsz: int = INPUT_SIZE
    lr: float = 4e-3
    warmup: int = 500
    seed: int = _TRAIN_SEED
    ema_decay: float = 0.999
    workers: int = 8
    reuse: int | None = 1  # None: "auto", from the measured scene and step rates
    fresh_steps: int = 260  # the first steps always take fresh batches (and measure the rates for "auto")
    pool: int = 8  # batches kept on the device for --reuse
    device: str = "auto"
    amp: bool = True  # bf16 autocast on CUDA
    init: str | None = None  # continue from this checkpoint's (EMA) weights: a fine-tuning stage
    log_every: int = 100


def _param_groups(model: Any) -> list[dict[str, Any]]:
    decay: list[Any] = []
    no_decay: list[Any] = []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}]


def _lr_at(cfg: TrainConfig, step: int, steps: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, steps - cfg.warmup))
    return cfg.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))


def _resolve_device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda, but torch sees no CUDA device (use --device cpu)")
    return torch.device(name)


class _Timer:
    """Compute time of the steps in a window: CUDA events on a GPU (the host runs ahead), wall time on a CPU."""

    def __init__(self, cuda: bool) -> None:
        import torch

        self.cuda, self.total = cuda, 0.0
        self.pending: list[tuple[Any, Any]] = []
        self._torch = torch
        self._t0 = 0.0
        self._start: Any = None

    def begin(self) -> None:
        if self.cuda:
            self._start = self._torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def end(self) -> None:
        if self.cuda:
            stop = self._torch.cuda.Event(enable_timing=True)
            stop.record()
            self.pending.append((self._start, stop))
        else:
            self.total += time.perf_counter() - self._t0

    def seconds(self) -> float:
        if self.cuda:
            self._torch.cuda.synchronize()
            self.total += sum(a.elapsed_time(b) for a, b in self.pending) / 1000
            self.pending = []
        return self.total


def train(out: Path, cfg: TrainConfig, summary_path: Path | None = None) -> Path:
    import torch

    from generator.demo.training.data import MAX_GT, batches, dihedral
    from generator.demo.training.export import export_onnx
    from generator.demo.training.loss import DetectionLoss
    from generator.demo.training.model import TinyYolo

    device = _resolve_device(cfg.device)
    cuda = device.type == "cuda"
    torch.manual_seed(cfg.seed)
    if cuda:
        torch.backends.cudnn.benchmark = True
    model = TinyYolo(len(CLASS_NAMES), cfg.imgsz)
    if cfg.init is not None:
        model.load_state_dict(torch.load(cfg.init, map_location="cpu", weights_only=True)["model"])
    model = model.to(device)
    for p in model.parameters():  # channels-last convolutions: faster with cuDNN and on CPU
        if p.ndim == 4:
            p.data = p.data.contiguous(memory_format=torch.channels_last)
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    pairs = list(zip(ema.state_dict().values(), model.state_dict().values(), strict=True))
    ema_float = [e for e, _ in pairs if e.dtype.is_floating_point]
    model_float = [m for e, m in pairs if e.dtype.is_floating_point]
    ema_other = [(e, m) for e, m in pairs if not e.dtype.is_floating_point]
    criterion = DetectionLoss()
    optimizer = torch.optim.AdamW(_param_groups(model), lr=cfg.lr, betas=(0.9, 0.999), fused=cuda)
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    points, strides = model.points, model.strides
    b, s = cfg.batch_size, cfg.imgsz
    params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {params} parameters, input {s}x{s}; device {device}; batch {b}, "
        f"reuse {cfg.reuse or 'auto'} after step {cfg.fresh_steps}, {cfg.workers} scene workers; "
        f"steps {cfg.steps or 'auto'}, time budget {cfg.time_budget_s or '-'} s",
        flush=True,
    )

    # --reuse auto: rates measured over reuse_window (fresh batches only); --steps auto: over steps_window.
    f = cfg.fresh_steps
    reuse_window = (f // 4, f)
    steps_window = (f + f // 8, f + f * 3 // 4)
    reuse = cfg.reuse or 1
    steps = cfg.steps if cfg.steps is not None else 10**9
    timer = _Timer(cuda)
    marks: dict[int, float] = {}

    pool_images = torch.empty((cfg.pool * b, 3, s, s), dtype=torch.uint8, device=device)
    pool_boxes = torch.zeros((cfg.pool * b, MAX_GT, 4), dtype=torch.float32, device=device)
    pool_classes = torch.full((cfg.pool * b, MAX_GT), -1, dtype=torch.int64, device=device)
    stream = batches(cfg.seed, b, s, cfg.workers, pin_memory=cuda)
    start = time.perf_counter()
    fresh = 0  # fresh batches taken from the stream
    data_wait = 0.0
    window: tuple[float, float, int] = (start, 0.0, 0)  # (time, data_wait, step) at the last log line
    stopped_by_budget = False
    history: list[dict[str, float]] = []
    step = 0
    try:
        while step < steps:
            if cfg.time_budget_s and time.perf_counter() - start > cfg.time_budget_s:
                stopped_by_budget = True
                break
            if cfg.stop_at is not None and step >= cfg.stop_at:
                break
            if step < f or (step - f) % reuse == 0:
                t0 = time.perf_counter()
                item = next(stream)
                data_wait += time.perf_counter() - t0
                images = item["images"].to(device, non_blocking=True)
                boxes = item["boxes"].to(device, non_blocking=True)
                classes = item["classes"].to(device, non_blocking=True)
                slot = slice((fresh % cfg.pool) * b, (fresh % cfg.pool + 1) * b)
                pool_images[slot], pool_boxes[slot], pool_classes[slot] = images, boxes, classes
                fresh += 1
            else:  # a step between fresh batches: a random draw from the recent batches on the device
                pick = torch.randint(0, min(fresh, cfg.pool) * b, (b,), generator=generator, device=device)
                images, boxes, classes = pool_images[pick], pool_boxes[pick], pool_classes[pick]
            timing = reuse_window[0] <= step < reuse_window[1]
            if timing:
                timer.begin()
            images, boxes = dihedral(images, boxes, generator)
            x = images.float().div_(255).contiguous(memory_format=torch.channels_last)
            lr = _lr_at(cfg, step, steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            model.train()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.amp and cuda):
                dist, logits = model(x)
            loss, parts = criterion(dist, logits, points, strides, boxes, classes, classes >= 0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0, foreach=True)
            optimizer.step()
            decay = cfg.ema_decay * (1 - math.exp(-(step + 1) / 300))
            with torch.no_grad():
                torch._foreach_lerp_(ema_float, model_float, 1 - decay)
                for e, m in ema_other:
                    e.copy_(m)
            if timing:
                timer.end()

            if step + 1 in (*reuse_window, *steps_window):
                if cuda:
                    torch.cuda.synchronize()
                marks[step + 1] = time.perf_counter()
            if step + 1 == reuse_window[1] and cfg.reuse is None:
                n = reuse_window[1] - reuse_window[0]
                wall = (marks[reuse_window[1]] - marks[reuse_window[0]]) / n
                compute = timer.seconds() / n
                # Steps per fresh batch so that the device computes while the workers draw the next one.
                reuse = max(1, min(6, round(wall / compute)))
                print(
                    f"calibrated: a fresh batch every {wall * 1e3:.0f} ms, a step computes in "
                    f"{compute * 1e3:.0f} ms -> --reuse {reuse}",
                    flush=True,
                )
            if step + 1 == steps_window[1] and cfg.steps is None:
                rate = (steps_window[1] - steps_window[0]) / (marks[steps_window[1]] - marks[steps_window[0]])
                remaining = cfg.time_budget_s - (marks[steps_window[1]] - start)
                # 3% slack for the log lines' synchronisations and slower stretches later on.
                steps = max(step + 1, int(step + 1 + 0.97 * rate * remaining) // 100 * 100)
                print(f"calibrated: {rate:.2f} steps/s -> --steps {steps}", flush=True)
            if step % cfg.log_every == 0 or step == steps - 1:
                now = time.perf_counter()
                values = {k: float(v) for k, v in parts.items()}  # the only synchronisation of a step
                done, interval, waited = step + 1 - window[2], now - window[0], data_wait - window[1]
                window = (now, data_wait, step + 1)
                detail = " ".join(f"{k} {v:.3f}" for k, v in values.items())
                print(
                    f"step {step:6d}/{steps if steps < 10**9 else '?'} loss {float(loss.detach()):.3f} "
                    f"({detail}) lr {lr:.2e} | {done * b / max(interval, 1e-9):.0f} img/s, {fresh * b} scenes, "
                    f"data wait {100 * waited / max(interval, 1e-9):.0f}% | {now - start:.0f}s",
                    flush=True,
                )
                history.append({"step": step, "loss": float(loss.detach()), **values, "elapsed_s": now - start})
            step += 1
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    wall_s = time.perf_counter() - start
    ema = ema.float().cpu()
    out.parent.mkdir(parents=True, exist_ok=True)
    ckpt = out.with_suffix(".pt")
    torch.save({"model": ema.state_dict(), "config": asdict(cfg), "steps": step, "reuse": reuse}, ckpt)
    reason = "time budget" if stopped_by_budget else "step count"
    repeat = f"--steps {steps} --reuse {reuse}" + (f" --stop-at {step}" if step < steps else "")
    print(
        f"trained {step} steps ({fresh * b} scenes, reuse {reuse}) in {wall_s:.0f}s, stopped by {reason}; "
        f"repeat with {repeat}; EMA weights -> {ckpt}",
        flush=True,
    )
    if summary_path is not None:
        summary = {
            "config": asdict(cfg),
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch": torch.__version__,
            "parameters": params,
            "steps": step,
            "planned_steps": steps if steps < 10**9 else None,
            "reuse": reuse,
            "stopped_by": reason,
            "repeat_with": repeat,
            "scenes": fresh * b,
            "images_seen": step * b,
            "wall_s": round(wall_s, 1),
            "data_wait_s": round(data_wait, 1),
            "log": history,
        }
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return export_onnx(ema, out)


def export_checkpoint(checkpoint: Path, out: Path, imgsz: int = INPUT_SIZE) -> Path:
    import torch

    from generator.demo.training.export import export_onnx
    from generator.demo.training.model import TinyYolo

    model = TinyYolo(len(CLASS_NAMES), imgsz)
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["model"])
    return export_onnx(model, out)


def _steps(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive step count or 'auto', got {text!r}")
    return value


def _reuse(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of steps per batch or 'auto', got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m generator.demo.training.train", description=doc.splitlines()[0])
    d = TrainConfig()
    parser.add_argument("--out", type=Path, required=True, help="ONNX file to write (the .pt checkpoint goes beside it)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default=d.device)
    parser.add_argument("--steps", type=_steps, default="auto", help="step count, or 'auto' (needs --time-budget-s)")
    parser.add_argument("--time-budget-s", type=float, default=d.time_budget_s, help="stop training after this")
    parser.add_argument(
        "--stop-at", type=int, help="stop at this step of the --steps schedule (repeats a run the budget stopped)"
    )
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--imgsz", type=int, default=d.imgsz)
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--warmup", type=int, default=d.warmup)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--ema-decay", type=float, default=d.ema_decay)
    parser.add_argument("--workers", type=int, default=d.workers, help="scene processes (0: in this one)")
    parser.add_argument(
        "--reuse", type=_reuse, default="1", help="training steps per fresh batch after --fresh-steps, or 'auto'"
    )
    parser.add_argument("--fresh-steps", type=int, default=d.fresh_steps, help="steps that take only fresh batches")
    parser.add_argument("--pool", type=int, default=d.pool, help="recent batches kept for --reuse")
    parser.add_argument("--no-amp", action="store_true", help="CUDA: train in float32 instead of bf16 autocast")
    parser.add_argument("--init", type=Path, help="start from this checkpoint's (EMA) weights")
    parser.add_argument("--log-every", type=int, default=d.log_every)
    parser.add_argument("--summary", type=Path, help="write a JSON summary of the run here")
    parser.add_argument("--from-checkpoint", type=Path, help="skip training: export this .pt (EMA weights)")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("error: training needs torch: pip install 'triton-detection-ensemble[train]'", file=sys.stderr)
        return 1
    if args.from_checkpoint:
        path = export_checkpoint(args.from_checkpoint, args.out, args.imgsz)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
        return 0
    if args.steps is None and args.time_budget_s <= 0:
        print("error: --steps auto needs --time-budget-s (or give --steps N)", file=sys.stderr)
        return 1
    if args.pool < 1 or args.batch_size < 1 or args.workers < 0 or args.fresh_steps < 8:
        print("error: --pool and --batch-size must be >= 1, --workers >= 0, --fresh-steps >= 8", file=sys.stderr)
        return 1
    cfg = TrainConfig(
        steps=args.steps,
        time_budget_s=args.time_budget_s,
        stop_at=args.stop_at,
        batch_size=args.batch_size,
        imgsz=args.imgsz,
        lr=args.lr,
        warmup=args.warmup,
        seed=args.seed,
        ema_decay=args.ema_decay,
        workers=args.workers,
        reuse=args.reuse,
        fresh_steps=args.fresh_steps,
        pool=args.pool,
        device=args.device,
        amp=not args.no_amp,
        init=str(args.init) if args.init else None,
        log_every=args.log_every,
    )
    path = train(args.out, cfg, args.summary)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
