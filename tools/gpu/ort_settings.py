"""ONNX Runtime's CUDA provider on the served graphs, outside Triton: the settings the GPU detectors use, measured.

    python -m tools.gpu.ort_settings --graphs DIR --out FILE.json [--seconds S]

Each (graph, setting) runs in a child process of its own, so its GPU memory and first-run times are its own:
session creation, the first run at each new batch size (cuDNN's algorithm search happens there), steady
images/s at batch 1, 8 and 32 through I/O binding as the served detector runs (input bound from a CuPy buffer,
outputs copied to the host), and the GPU memory the process took. Also: where each graph's nodes run (nodes the
CUDA provider lacks fall back to the CPU) and whether ONNX Runtime's CUDA graphs can capture the graph.
``DIR`` holds served graphs by label (``<label>.onnx``); needs onnxruntime-gpu and CuPy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

SETTINGS = {  # label: (cudnn_conv_algo_search, arena_extend_strategy)
    "chosen HEURISTIC kSameAsRequested": ("HEURISTIC", "kSameAsRequested"),
    "HEURISTIC kNextPowerOfTwo": ("HEURISTIC", "kNextPowerOfTwo"),
    "ORT default EXHAUSTIVE kNextPowerOfTwo": ("EXHAUSTIVE", "kNextPowerOfTwo"),
    "DEFAULT kSameAsRequested": ("DEFAULT", "kSameAsRequested"),
}
FIRST_RUNS = (1, 8, 32, 3)  # new shapes in turn: what a dynamic batcher hands a fresh session
# Then only shapes the session has run before: is the setup paid once per shape, or on every change of shape?
CHANGES = (8, 8, 32, 32, 8, 1, 8, 32)
STEADY = (1, 8, 32)
IMAGE = (640, 640)  # the served size, where the export leaves the spatial size open


def _session(path: str, options: dict[str, str], log_level: int = 3, **config: str) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    return ort.InferenceSession(path, so, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])


def _bound_run(session: Any, batch: Any) -> float:
    """One run as the served detector makes it; returns seconds."""
    import cupy

    binding = session.io_binding()
    name = session.get_inputs()[0].name
    binding.bind_input(name, "cuda", 0, np.uint8, list(batch.shape), batch.data.ptr)
    for output in session.get_outputs():
        binding.bind_output(output.name, "cuda", 0)
    cupy.cuda.get_current_stream().synchronize()
    start = time.perf_counter()
    session.run_with_iobinding(binding)
    binding.copy_outputs_to_cpu()
    return time.perf_counter() - start


def _images(session: Any, size: int) -> Any:
    import cupy

    _, height, width, channels = session.get_inputs()[0].shape
    if not isinstance(height, int) or not isinstance(width, int):
        height, width = IMAGE
    rng = np.random.default_rng(size)
    return cupy.asarray(rng.integers(0, 256, (size, height, width, channels), dtype=np.uint8))


def worker(path: str, conv: str, arena: str, seconds: float) -> dict[str, Any]:
    """One graph with one setting, in this process."""
    import cupy

    free_before = cupy.cuda.runtime.memGetInfo()[0]
    start = time.perf_counter()
    session = _session(path, {"device_id": "0", "cudnn_conv_algo_search": conv, "arena_extend_strategy": arena})
    result: dict[str, Any] = {"session_s": round(time.perf_counter() - start, 3), "providers": session.get_providers()}
    static = session.get_inputs()[0].shape[0]
    sizes = [static] if isinstance(static, int) else list(FIRST_RUNS)
    result["first_run_ms"] = {str(b): round(1000 * _bound_run(session, _images(session, b)), 2) for b in sizes}
    if not isinstance(static, int):
        result["seen_shape_ms"] = [[b, round(1000 * _bound_run(session, _images(session, b)), 2)] for b in CHANGES]
    steady = {}
    for size in ([static] if isinstance(static, int) else STEADY):
        batch = _images(session, size)
        for _ in range(3):
            _bound_run(session, batch)
        runs, busy = 0, 0.0
        while busy < seconds:
            busy += _bound_run(session, batch)
            runs += 1
        steady[str(size)] = {"img_s": round(runs * size / busy, 1), "ms_per_batch": round(1000 * busy / runs, 3)}
    result["steady"] = steady
    result["gpu_memory_mib"] = round((free_before - cupy.cuda.runtime.memGetInfo()[0]) / 2**20, 1)
    return result


def placement(path: str) -> dict[str, Any]:
    """Which provider runs how many nodes, from ONNX Runtime's verbose session log (a child process)."""
    code = ("import sys, onnxruntime as ort; so = ort.SessionOptions(); so.log_severity_level = 0; "
            "ort.InferenceSession(sys.argv[1], so, providers=['CUDAExecutionProvider', 'CPUExecutionProvider'])")
    run = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120, check=False)
    log = run.stdout + run.stderr
    counts = {provider: int(n) for provider, n in
              re.findall(r"placed on \[(\w+)\]\. Number of nodes: (\d+)", log)}
    on_cpu = sorted(set(re.findall(r"Node\(s\) placed on \[CPUExecutionProvider\]\..*?\n((?:\s+\S+.*\n)*)", log)))
    return {"nodes": counts, "cpu_nodes_listing": [line.strip() for block in on_cpu for line in block.splitlines()][:40],
            "returncode": run.returncode, "warnings": [line for line in log.splitlines() if "W:" in line][:10]}


def cuda_graph(path: str) -> dict[str, Any]:
    """Can ONNX Runtime capture this graph with CUDA graphs, and what does a captured batch-1 run take?"""
    import cupy

    try:
        session = _session(path, {"device_id": "0", "enable_cuda_graph": "1",
                                  "cudnn_conv_algo_search": "HEURISTIC"})
        batch = _images(session, 1)
        times = [_bound_run(session, batch) for _ in range(20)]  # capture on the first runs, then replay
        cupy.cuda.get_current_stream().synchronize()
        return {"captured": True, "ms_batch1_median": round(1000 * float(np.median(times[5:])), 3)}
    except Exception as exc:  # noqa: BLE001 -- the refusal is the finding
        return {"captured": False, "error": str(exc).strip().splitlines()[-1][:400]}


def _child(mode: str, *args: str, timeout: float = 90.0) -> Any:
    run = subprocess.run([sys.executable, "-m", "tools.gpu.ort_settings", "--child", mode, *args],
                         capture_output=True, text=True, timeout=timeout, check=False)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": run.stderr[-1500:], "returncode": run.returncode}


def orchestrate(graphs: Path, seconds: float, settings_for: Sequence[str]) -> dict[str, Any]:
    results: dict[str, Any] = {"environment": _child("environment")}
    for path in sorted(graphs.glob("*.onnx")):
        label = path.stem
        entry: dict[str, Any] = {"placement": placement(str(path))}
        if label in settings_for:
            entry["settings"] = {name: _child("worker", str(path), conv, arena, str(seconds))
                                 for name, (conv, arena) in SETTINGS.items()}
            entry["cuda_graph"] = _child("cuda_graph", str(path))
        results[label] = entry
        print(f"ort_settings: {label} done", flush=True)
    return results


def environment() -> dict[str, Any]:
    import cupy
    import onnxruntime as ort

    return {"onnxruntime": ort.__version__, "providers": ort.get_available_providers(), "numpy": np.__version__,
            "cupy": cupy.__version__, "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "ld_library_path": os.environ.get("LD_LIBRARY_PATH", "")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--graphs", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seconds", type=float, default=0.6)
    parser.add_argument("--settings-for", nargs="*", default=("demo_fp32", "v8n_fp32"))
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        mode, *rest = args.child
        if mode == "worker":
            print(json.dumps(worker(rest[0], rest[1], rest[2], float(rest[3]))))
        elif mode == "cuda_graph":
            print(json.dumps(cuda_graph(rest[0])))
        else:
            print(json.dumps(environment()))
        return 0
    if args.graphs is None or args.out is None:
        parser.error("--graphs and --out are required")
    args.out.write_text(json.dumps(orchestrate(args.graphs, args.seconds, args.settings_for), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
