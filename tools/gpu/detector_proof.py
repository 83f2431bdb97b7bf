"""The GPU detector served, proven on a GPU host: one embedded Triton serving every case of ``detector_cases``.

Run on the device machine (docs/results/gpu/README.md, "GPU detector", has the carried files and commands)::

    python -m tools.gpu.detector_proof --data DIR --out DIR --stub-pythonpath PATHS [--seconds S]

``--data`` is what ``tools.gpu.detector_repos`` wrote here (repositories, deduplicated graphs, CPU reference).
Sections, each recorded even when another fails: the stubs' environment, the CUDA provider's settings outside
Triton (``tools.gpu.ort_settings``), the server start, detections of every ensemble against the CPU reference
(demo scenes and the format zoo), the served heads against the CPU heads, hostile images, each detector's
throughput at batch 1, 8 and 32 from Triton's statistics, end-to-end images/s and p50/p95 at concurrency 1..128
with every step's utilisation (which one bounds), and the GPU memory of each process. Writes ``proof.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.gpu import detector_checks as checks
from tools.gpu import detector_load as load
from tools.gpu.detector_cases import CASES, load_reference
from tools.gpu.detector_repos import restore
from tools.gpu.gpu_http import TritonHttp
from tools.gpu.gpu_probe import Probe

CUDA_POOL_BYTES = 2 << 30
# One repository per distinct served graph, for the per-graph sections.
GRAPHS = {"demo_fp32": "demo_fp32_gpupre", "demo_fp32_nms": "demo_fp32_gpunms", "demo_fp16": "demo_fp16",
          "demo_int8": "demo_int8", "demo_int8f32": "demo_int8f32", "v8n_fp32": "v8n_fp32", "v8n_fp16": "v8n_fp16",
          "v8n_int8": "v8n_int8"}


def stub_environment(stub_pythonpath: str) -> dict[str, Any]:
    """Versions as the Python-backend stubs see them (the stub path first), and the GPU."""
    code = ("import numpy, cv2, onnxruntime, cupy; from nvidia import nvimgcodec; "
            "print(numpy.__version__, cv2.__version__, onnxruntime.__version__, cupy.__version__, "
            "nvimgcodec.__version__, cupy.cuda.runtime.getDeviceCount(), ','.join(onnxruntime.get_available_providers()))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": stub_pythonpath})
    keys = ("numpy", "opencv", "onnxruntime", "cupy", "nvimgcodec", "cuda_devices", "providers")
    return {"gpu": checks.smi("--query-gpu=name,driver_version,memory.total"), "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "stub": dict(zip(keys, run.stdout.split(), strict=False)) if run.returncode == 0 else run.stderr[-1500:]}


def graph_folder(repos: Path, folder: Path) -> Path:
    """The distinct served graphs by label, for ``ort_settings``."""
    folder.mkdir(parents=True, exist_ok=True)
    for label, case in GRAPHS.items():
        link = folder / f"{label}.onnx"
        if (repos / case).is_dir() and not link.exists():
            link.symlink_to((repos / case / f"{case}_detector" / "1" / "model.onnx").resolve())
    return folder


def ort_settings(graphs: Path, out: Path, stub_pythonpath: str, src: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{stub_pythonpath}{os.pathsep}{src}"}
    target = out / "ort_settings.json"
    run = subprocess.run([sys.executable, "-m", "tools.gpu.ort_settings", "--graphs", str(graphs), "--out",
                          str(target)], capture_output=True, text=True, env=env, timeout=300, check=False)
    return {"returncode": run.returncode, "file": target.name, "stderr_tail": run.stderr[-2000:]}


def serve(repos: Path, out: Path, stub_pythonpath: str) -> Any:
    from generator.server.embedded import EmbeddedServer
    from generator.server.ports import free_ports

    # The embedded 2.51 stub ignores PYTHONPATH; the device script's .pth file prepends TDE_STUB_PYTHONPATH.
    os.environ["PYTHONPATH"] = os.environ["TDE_STUB_PYTHONPATH"] = stub_pythonpath
    folders = sorted(p for p in repos.iterdir() if p.is_dir())
    extra = tuple(f"--model-repository={p.resolve()}" for p in folders[1:])
    # A model that fails to load must not take the others with it: the failure is a finding of its own.
    # Every detector instance warms one session per batch bucket at load: load them side by side.
    lenient = ("--exit-on-error=false", "--strict-readiness=false", "--model-load-thread-count=16")
    http, grpc, metrics = free_ports(3)
    server = EmbeddedServer(folders[0], http, grpc, metrics, log_file=out / "server.log",
                            extra_args=(*extra, *lenient, f"--cuda-memory-pool-byte-size=0:{CUDA_POOL_BYTES}"))
    try:
        server.start()
        server.wait_ready(timeout_s=300)
    except Exception:
        server.stop()
        raise
    return server


def detector_configs(client: TritonHttp, names: Sequence[str]) -> dict[str, Any]:
    """Each detector's instance groups and parameters as the server loaded them."""
    from tools.gpu.gpu_http import InferError

    result: dict[str, Any] = {}
    for name in names:
        try:
            config = client.json(f"/v2/models/{name}_detector/config")
        except InferError as exc:
            result[name] = {"error": str(exc)}
            continue
        result[name] = {"instance_group": config["instance_group"],
                        "parameters": {k: v["string_value"] for k, v in config.get("parameters", {}).items()}}
    return result


def run(args: argparse.Namespace) -> None:
    proof = Probe(args.out, "proof.json")
    repos = args.data / "repos"
    restore(args.data, repos)
    src = Path(__file__).resolve().parents[2]
    proof.section("environment", lambda: stub_environment(args.stub_pythonpath))
    proof.section("gpu_memory_before", checks.gpu_memory)
    start = time.perf_counter()
    server = serve(repos, args.out, args.stub_pythonpath)
    proof.results["server_ready_s"] = round(time.perf_counter() - start, 1)
    url = server.http_url
    client = TritonHttp(url)
    try:
        sections(proof, client, url, args)
    finally:
        proof.results["server_stop"] = server.stop()
        proof.results["server_log_lines"] = checks.log_lines(args.out / "server.log")
        proof.save()
    # Outside Triton, once the server is gone: the GPU is this section's alone.
    if not args.skip_settings:
        proof.section("ort_settings", lambda: ort_settings(graph_folder(repos, args.out.parent / "graphs"),
                                                           args.out, args.stub_pythonpath, src))
    proof.results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    proof.save()


def sections(proof: Probe, client: TritonHttp, url: str, args: argparse.Namespace) -> None:
    reference, heads = load_reference(args.data)
    named = checks.proof_images()
    names = [name for name in CASES if (args.data / "repos" / name).is_dir()]
    graphs = {label: case for label, case in GRAPHS.items() if case in names}
    proof.section("models_ready", lambda: checks.models_ready(client))
    proof.section("configs", lambda: detector_configs(client, names))
    proof.section("gpu_memory_loaded", checks.gpu_memory)
    proof.section("detections", lambda: checks.detections(client, named, reference, names))
    proof.section("heads", lambda: checks.heads(client, named, reference, heads, names))
    hostile = [n for n in ("demo_fp32_default", "demo_fp32_cpupre", "demo_fp32_gpupre", "v8n_fp32") if n in names]
    proof.section("hostile", lambda: checks.hostile(url, named["scene-0"], hostile))
    proof.section("detector_throughput", lambda: load.detector_throughput(url, named, graphs, args.detector_seconds))
    sweeps = [name for name in names if CASES[name].sweep]
    proof.section("end_to_end", lambda: load.end_to_end(url, sweeps, args.seconds, args.levels,
                                                        instances_of(args.data / "repos", sweeps)))
    proof.section("gpu_memory_after", checks.gpu_memory)


def instances_of(repos: Path, names: Sequence[str]) -> dict[str, dict[str, int]]:
    """Instance count of each step of each case, from its configs."""
    counts: dict[str, dict[str, int]] = {}
    for name in names:
        counts[name] = {}
        for step in ("preprocess", "detector", "nms"):
            text = (repos / name / f"{name}_{step}" / "config.pbtxt").read_text()
            counts[name][step] = int(text.split("count:")[1].split()[0])
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="what tools.gpu.detector_repos wrote")
    parser.add_argument("--out", type=Path, required=True, help="where proof.json and the logs go")
    parser.add_argument("--stub-pythonpath", default=os.environ.get("PYTHONPATH", ""),
                        help="PYTHONPATH of the Python-backend stubs (numpy < 2, CuPy 13, onnxruntime-gpu first)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each end-to-end point")
    parser.add_argument("--detector-seconds", type=float, default=2.0, help="length of each detector point")
    parser.add_argument("--levels", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--skip-settings", action="store_true", help="leave out the CUDA settings bench")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

