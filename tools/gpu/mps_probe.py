"""Does the GPU run work from several processes at once, or take turns? (issue 28's named bound)

The served yolo11n pipeline reached 40 % of its engine on the H200, with the detector step's execution at
42-52 ms whatever the batch against 4-11 ms for the engine alone. The hypothesis: Triton's Python stubs are
separate processes, each with its own CUDA context, and contexts of different processes time-slice the GPU
unless CUDA MPS merges them. This probe measures that alone, with no Triton: N workers each send batches of
640x640 images from host memory through a YOLO-sized convolution stack (copy in, forward, copy out, as a stub
does), as N processes and as N threads of one process (one CUDA stream each), then as N processes again under
an MPS daemon when one can be started. Aggregate images/s and each call's p50 are printed and written as JSON.

Run on a GPU host: ``python3 tools/gpu/mps_probe.py --out OUT.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import multiprocessing as mp
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("mps_probe")


def _network(torch: Any) -> Any:
    """About yolo11n's cost at 640 (6-7 GFLOPs an image): strided convolutions with SiLU, then a wide head."""
    nn = torch.nn
    layers, width = [], [3, 16, 32, 64, 128, 256]
    for c_in, c_out in itertools.pairwise(width):
        layers += [nn.Conv2d(c_in, c_out, 3, 2, 1), nn.SiLU(), nn.Conv2d(c_out, c_out, 3, 1, 1), nn.SiLU()]
    layers += [nn.Conv2d(256, 144, 1)]
    return nn.Sequential(*layers).cuda().eval()


def _calls(batch: int, seconds: float, stream: bool = False) -> list[float]:
    """Back-to-back calls for ``seconds`` after a warm-up; each call's ms."""
    import numpy as np
    import torch

    net = _network(torch)
    frames = np.random.default_rng(0).random((batch, 3, 640, 640), dtype=np.float32)
    context = torch.cuda.stream(torch.cuda.Stream()) if stream else torch.cuda.device(0)
    times: list[float] = []
    with torch.inference_mode(), context:
        for _ in range(5):
            net(torch.from_numpy(frames).cuda()).cpu()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            net(torch.from_numpy(frames).cuda()).cpu().numpy()  # .cpu() waits for the stream
            times.append((time.perf_counter() - start) * 1000.0)
    return times


def _process_worker(batch: int, seconds: float, queue: Any) -> None:
    queue.put(_calls(batch, seconds))


def _summary(kind: str, workers: int, batch: int, seconds: float, runs: list[list[float]]) -> dict[str, Any]:
    import numpy as np

    images = sum(len(r) for r in runs) * batch
    merged = np.concatenate([np.asarray(r) for r in runs])
    row = {"kind": kind, "workers": workers, "batch": batch, "images_per_s": round(images / seconds, 1),
           "call_p50_ms": round(float(np.percentile(merged, 50)), 2),
           "call_p95_ms": round(float(np.percentile(merged, 95)), 2)}
    logger.info("%s", row)
    return row


def _as_processes(workers: int, batch: int, seconds: float) -> list[list[float]]:
    context = mp.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_process_worker, args=(batch, seconds, queue)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    runs = [queue.get(timeout=seconds + 300) for _ in procs]
    for proc in procs:
        proc.join()
    return runs


def _as_threads(workers: int, batch: int, seconds: float) -> list[list[float]]:
    runs: list[list[float]] = []
    threads = [threading.Thread(target=lambda: runs.append(_calls(batch, seconds, stream=True)))
               for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return runs


def _mps(start: bool, folder: Path) -> bool:
    """Start (or quit) the MPS control daemon; False when this host has none or refuses it."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        logger.warning("no nvidia-cuda-mps-control on this host")
        return False
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    if start:
        (folder / "pipe").mkdir(parents=True, exist_ok=True)
        (folder / "log").mkdir(parents=True, exist_ok=True)
        done = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, check=False)
        os.environ.update(CUDA_MPS_PIPE_DIRECTORY=env["CUDA_MPS_PIPE_DIRECTORY"],
                          CUDA_MPS_LOG_DIRECTORY=env["CUDA_MPS_LOG_DIRECTORY"])
        logger.info("MPS daemon: rc %d %s", done.returncode, (done.stdout + done.stderr).strip())
        return done.returncode == 0
    subprocess.run([control], input="quit\n", env=env, text=True, check=False)
    return True


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--batches", default="8,32")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    rows: list[dict[str, Any]] = []
    for batch in batches:
        for n in counts:
            rows.append(_summary("processes", n, batch, args.seconds, _as_processes(n, batch, args.seconds)))
            rows.append(_summary("threads", n, batch, args.seconds, _as_threads(n, batch, args.seconds)))
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "mps"
    if _mps(True, folder):
        try:
            for batch in batches:
                for n in counts:
                    runs = _as_processes(n, batch, args.seconds)
                    rows.append(_summary("processes+mps", n, batch, args.seconds, runs))
        finally:
            _mps(False, folder)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
