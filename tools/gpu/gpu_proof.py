"""The served GPU preprocess, proven on a GPU host: one embedded Triton serving CPU- and GPU-preprocess ensembles.

Run on the device machine (docs/results/gpu/README.md has the carried files and the exact commands)::

    python -m tools.gpu.gpu_proof --out DIR --repos DIR [--stub-pythonpath PATHS] [--seconds S]

``--repos`` holds model repositories built here beforehand (``python -m tools.gpu.gpu_proof --build DIR``):
``yolo_cpu`` (CPU preprocess), ``yolo_gpu`` (``--preprocess-device gpu``), ``yolo_gpunms`` (GPU preprocess and
``--nms-in-graph``) and ``yolo_gpu4`` (four GPU preprocess instances, batches up to 32). The detector is the
embedded ONNX Runtime one, on the CPU. Sections, each recorded even when another fails: the environment the
stubs see, the server start, pixel agreement of the two preprocess steps, detection agreement of the ensembles
on demo scenes and on every accepted format, hostile images, the preprocess step's throughput from Triton's
statistics, the sustained GPU preprocess and end-to-end images/s at concurrency 1..64. Writes ``proof.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from generator.builder.spec.options import Device
from generator.server.ports import free_ports
from generator.serving.contract import (
    BOXES,
    CLASSES,
    LETTERBOX,
    NUM_DETECTIONS,
    OUTPUTS,
    PREPROCESSED,
    SCORES,
)
from tools.gpu.gpu_http import InferError, Load, TritonHttp, drive
from tools.gpu.gpu_probe import SIZES, Probe, camera_jpegs, diff_stats

ENSEMBLES = {"cpu": "yolo_cpu", "gpu": "yolo_gpu", "gpunms": "yolo_gpunms", "gpu4": "yolo_gpu4"}
CUDA_POOL_BYTES = 2 << 30  # Triton's default 64 MiB pool fills at a few batches of 640x640 images in flight


def stub_environment(stub_pythonpath: str) -> dict[str, Any]:
    """Versions as a Python-backend stub sees them (numpy 1.26 and CuPy 13 first on its path)."""
    code = ("import numpy, cv2, onnxruntime, cupy; from nvidia import nvimgcodec; "
            "print(numpy.__version__, cv2.__version__, onnxruntime.__version__, cupy.__version__, "
            "nvimgcodec.__version__, cupy.cuda.runtime.getDeviceCount())")
    env = {**os.environ, "PYTHONPATH": stub_pythonpath}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip()
    except FileNotFoundError:
        smi = "no nvidia-smi"
    keys = ("numpy", "opencv", "onnxruntime", "cupy", "nvimgcodec", "cuda_devices")
    values = run.stdout.split()
    return {"gpu": smi, "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
            "stub": dict(zip(keys, values, strict=False)) if run.returncode == 0 else run.stderr[-1500:]}


def demo_scenes() -> list[bytes]:
    from loadtest.images import synthetic_images

    return synthetic_images([(640, 480), (1280, 720), (1920, 1080), (480, 640)], per_size=8, seed=14)


def _pixel_row(cpu: dict[str, np.ndarray], gpu: dict[str, np.ndarray]) -> dict[str, Any]:
    return {**diff_stats(gpu[PREPROCESSED], cpu[PREPROCESSED]),
            "letterbox_equal": bool(np.array_equal(cpu[LETTERBOX], gpu[LETTERBOX]))}


def pixel_agreement(client: TritonHttp, named: dict[str, bytes]) -> dict[str, Any]:
    """The two preprocess models on the same images, one image per request: the tensors the detector gets."""
    rows: dict[str, Any] = {}
    for name, data in named.items():
        outputs = (PREPROCESSED, LETTERBOX)
        try:
            cpu = client.infer(f"{ENSEMBLES['cpu']}_preprocess", [data], outputs)
            gpu = client.infer(f"{ENSEMBLES['gpu']}_preprocess", [data], outputs)
        except InferError as exc:
            rows[name] = {"error": str(exc)}
            continue
        rows[name] = _pixel_row(cpu, gpu)
    return rows


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return float(w * h / union) if union > 0 else 0.0


def compare_detections(ref: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> dict[str, Any]:
    """Same boxes? ``identical``: every output equal; ``matched``: same class, IoU >= 0.9 (greedy by score)."""
    n_ref, n_other = int(ref[NUM_DETECTIONS].ravel()[0]), int(other[NUM_DETECTIONS].ravel()[0])
    boxes_a, boxes_b = ref[BOXES][0][:n_ref], other[BOXES][0][:n_other]
    free = list(range(n_other))
    matched, score_diff = 0, 0.0
    for i in range(n_ref):
        best = max(free, key=lambda j: _iou(boxes_a[i], boxes_b[j]), default=None)
        if best is not None and ref[CLASSES][0][i] == other[CLASSES][0][best] and \
                _iou(boxes_a[i], boxes_b[best]) >= 0.9:
            matched += 1
            score_diff = max(score_diff, abs(float(ref[SCORES][0][i] - other[SCORES][0][best])))
            free.remove(best)
    identical = n_ref == n_other and all(np.array_equal(ref[k], other[k]) for k in OUTPUTS)
    return {"ref": n_ref, "other": n_other, "matched": matched, "identical": identical,
            "max_score_diff": round(score_diff, 6)}


def detection_agreement(client: TritonHttp, named: dict[str, bytes], others: Sequence[str]) -> dict[str, Any]:
    """Each ensemble in ``others`` against the CPU-preprocess one, image by image."""
    rows: dict[str, Any] = {}
    totals = {key: {"images": 0, "identical": 0, "ref_boxes": 0, "matched": 0, "other_boxes": 0} for key in others}
    for name, data in named.items():
        ref = client.infer(ENSEMBLES["cpu"], [data])
        rows[name] = {}
        for key in others:
            row = compare_detections(ref, client.infer(ENSEMBLES[key], [data]))
            rows[name][key] = row
            total = totals[key]
            total["images"] += 1
            total["identical"] += int(row["identical"])
            total["ref_boxes"] += row["ref"]
            total["matched"] += row["matched"]
            total["other_boxes"] += row["other"]
    return {"totals": totals, "images": rows}


def hostile(client: TritonHttp, url: str, good: bytes) -> dict[str, Any]:
    """Each bad image alone on both ensembles (same message?), then mixed with good ones in flight at once."""
    from tests.fixtures.image_corpus import bad_images

    rows: dict[str, Any] = {}
    for name, data in bad_images().items():
        messages = {}
        for key in ("cpu", "gpu"):
            try:
                client.infer(ENSEMBLES[key], [data])
                messages[key] = "accepted"
            except InferError as exc:
                messages[key] = str(exc)
        after = client.infer(ENSEMBLES["gpu"], [good])
        same = messages["cpu"].replace(ENSEMBLES["cpu"], "") == messages["gpu"].replace(ENSEMBLES["gpu"], "")
        rows[name] = {**messages, "same": same,
                      "next_valid_ok": int(after[NUM_DETECTIONS].ravel()[0]) >= 0}
    mixed = [good if i % 2 else data for i, data in enumerate(list(bad_images().values()) * 2)]

    def one(data: bytes) -> str:
        try:
            TritonHttp(url).infer(ENSEMBLES["gpu"], [data])
            return "ok"
        except InferError:
            return "failed"

    with ThreadPoolExecutor(len(mixed)) as pool:
        outcome = list(pool.map(one, mixed))
    return {"alone": rows, "in_flight_together": {
        "good_ok": sum(o == "ok" for i, o in enumerate(outcome) if i % 2),
        "good_sent": len(mixed) // 2, "bad_failed": sum(o == "failed" for i, o in enumerate(outcome) if not i % 2)}}


def step_stats(client: TritonHttp, model: str) -> dict[str, int]:
    stats = client.json(f"/v2/models/{model}/stats")["model_stats"][0]
    inference = stats["inference_stats"]
    return {"inferences": int(stats["inference_count"]), "executions": int(stats["execution_count"]),
            "busy_ns": sum(int(inference[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output")),
            "infer_ns": int(inference["compute_infer"]["ns"])}


def measured(client: TritonHttp, model: str, load: Load, concurrency: int) -> dict[str, Any]:
    """Drive ``load`` and read the step's statistics over exactly that window."""
    before = step_stats(client, model)
    wall = drive(load, concurrency)
    after = step_stats(client, model)
    delta = {k: after[k] - before[k] for k in after}
    busy_s = delta["busy_ns"] / 1e9
    return {**wall, "executions": delta["executions"], "inferences": delta["inferences"],
            "mean_batch": round(delta["inferences"] / max(delta["executions"], 1), 2),
            "step_images_per_busy_s": round(delta["inferences"] / busy_s, 1) if busy_s else None,
            "infer_us_per_image": round(delta["infer_ns"] / 1e3 / max(delta["inferences"], 1), 1)}


def step_throughput(url: str, jpegs: dict[tuple[int, int], list[bytes]], seconds: float) -> dict[str, Any]:
    """Each preprocess step alone (one instance): batch-1 requests one at a time, batch-8 requests four in flight.

    Only LETTERBOX is asked back, so the client does not pull 1.2 MB per image; the step computes the same.
    """
    client = TritonHttp(url)
    results: dict[str, Any] = {}
    for key in ("cpu", "gpu"):
        model = f"{ENSEMBLES[key]}_preprocess"
        for size, images in jpegs.items():
            for batch, concurrency in ((1, 1), (8, 4)):
                requests = tuple(tuple(images[i : i + batch]) for i in range(0, len(images) - batch + 1, batch))
                load = Load(url, model, requests, (LETTERBOX,), seconds, 1)
                drive(Load(url, model, requests[:2], (LETTERBOX,), 0.3, 1), 1)  # warm-up
                results[f"{key} {size[0]}x{size[1]} batch{batch}"] = measured(client, model, load, concurrency)
    return results


def sustained(url: str, jpegs: dict[tuple[int, int], list[bytes]], seconds: float) -> dict[str, Any]:
    """The four-instance GPU preprocess step under many batch-8 requests in flight (batches up to 32)."""
    client = TritonHttp(url)
    model = f"{ENSEMBLES['gpu4']}_preprocess"
    results: dict[str, Any] = {}
    for size, images in jpegs.items():
        requests = tuple(tuple(images[i : i + 8]) for i in range(0, len(images) - 7, 8))
        for concurrency in (16, 32, 64):
            load = Load(url, model, requests, (LETTERBOX,), seconds, 1)
            results[f"{size[0]}x{size[1]} c{concurrency}"] = measured(client, model, load, concurrency)
    return results


def end_to_end(url: str, jpegs: list[bytes], seconds: float, levels: Sequence[int]) -> dict[str, Any]:
    """Whole ensembles, one 1280x720 JPEG per request, ``levels`` requests in flight."""
    client = TritonHttp(url)
    results: dict[str, Any] = {}
    requests = tuple((data,) for data in jpegs)
    for key in ("cpu", "gpu", "gpunms"):
        model = ENSEMBLES[key]
        drive(Load(url, model, requests[:4], OUTPUTS, 0.5, 1), 4)  # warm-up
        for concurrency in levels:
            row = measured(client, f"{model}_preprocess", Load(url, model, requests, OUTPUTS, seconds, 1), concurrency)
            results[f"{key} c{concurrency}"] = row
    return results


def serve(folders: Sequence[Path], log: Path, stub_pythonpath: str) -> Any:
    """Start the embedded Triton on ``folders`` (model repositories); the stubs get ``stub_pythonpath``."""
    from generator.server.embedded import EmbeddedServer

    # The embedded 2.51 stub ignores PYTHONPATH (measured: its sys.path is the venv's); the device script's .pth
    # file prepends TDE_STUB_PYTHONPATH instead. This process started before either was set.
    os.environ["PYTHONPATH"] = os.environ["TDE_STUB_PYTHONPATH"] = stub_pythonpath
    extra = tuple(f"--model-repository={p.resolve()}" for p in folders[1:])
    http, grpc, metrics = free_ports(3)
    server = EmbeddedServer(folders[0], http, grpc, metrics, log_file=log,
                            extra_args=(*extra, f"--cuda-memory-pool-byte-size=0:{CUDA_POOL_BYTES}"))
    try:
        server.start()
        server.wait_ready(timeout_s=240)
    except Exception:
        server.stop()
        raise
    return server


def serve_with_fallback(repos: Path, out: Path, stub_pythonpath: str, proof: Probe) -> Any:
    """Every ensemble; if they do not load, the preprocess models alone (their sections still run)."""
    from generator.errors import ServerError

    folders = sorted(p for p in repos.iterdir() if p.is_dir())
    try:
        return serve(folders, out / "server.log", stub_pythonpath)
    except ServerError as exc:
        proof.results["fallback"] = f"ensembles did not load ({exc}); serving the preprocess models alone"
        alone = out.parent / f"{out.name}-preprocess-only"
        for folder in folders:
            for model in folder.glob("*_preprocess"):
                shutil.copytree(model, alone / model.name, dirs_exist_ok=True)
        return serve([alone], out / "server-fallback.log", stub_pythonpath)


def build_repositories(destination: Path, onnx_path: Path | None = None, device: Device = "gpu"
                       ) -> list[Path]:
    """The repositories the proof serves, built where ``generator build`` runs (no GPU needed to build).

    ``device="cpu"`` builds the same four with the CPU preprocess: the dry run of the whole proof on a machine
    without a GPU.
    """
    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import BuildOptions
    from generator.demo import DEMO_ONNX

    source = onnx_path or DEMO_ONNX
    variants = {
        "cpu": BuildOptions(name=ENSEMBLES["cpu"], instances=(1, 2, 1)),
        "gpu": BuildOptions(name=ENSEMBLES["gpu"], instances=(1, 2, 1), preprocess_device=device),
        "gpunms": BuildOptions(name=ENSEMBLES["gpunms"], instances=(1, 2, 1), preprocess_device=device,
                               nms_in_graph=True),
        "gpu4": BuildOptions(name=ENSEMBLES["gpu4"], instances=(4, 1, 1), max_batch=32, preprocess_device=device),
    }
    built = []
    for key, options in variants.items():
        built.append(destination / key)
        build_repository(source, built[-1], options, force=True)
    return built


def run(args: argparse.Namespace) -> None:
    proof = Probe(args.out, "proof.json")
    proof.section("environment", lambda: stub_environment(args.stub_pythonpath))
    start = time.perf_counter()
    server = serve_with_fallback(args.repos, args.out, args.stub_pythonpath, proof)
    proof.results["server_ready_s"] = round(time.perf_counter() - start, 1)
    url = server.http_url
    client = TritonHttp(url)
    try:
        from tests.fixtures.image_corpus import zoo

        scenes = {f"scene-{i}": data for i, data in enumerate(demo_scenes())}
        formats = zoo()
        jpegs = camera_jpegs()
        proof.section("configs", lambda: {k: client.json(f"/v2/models/{v}_preprocess/config")["instance_group"]
                                          for k, v in ENSEMBLES.items()})
        proof.section("pixels", lambda: pixel_agreement(client, {**dict(list(scenes.items())[:8]), **formats}))
        proof.section("detections_demo", lambda: detection_agreement(client, scenes, ("gpu", "gpunms")))
        proof.section("detections_formats", lambda: detection_agreement(client, formats, ("gpu",)))
        proof.section("hostile", lambda: hostile(client, url, scenes["scene-0"]))
        proof.section("step_throughput", lambda: step_throughput(url, jpegs, args.seconds))
        proof.section("sustained_gpu4", lambda: sustained(url, jpegs, args.seconds))
        proof.section("end_to_end", lambda: end_to_end(url, jpegs[SIZES[0]], args.seconds, args.levels))
    finally:
        proof.results["server_stop"] = server.stop()
        proof.results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        proof.save()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="where proof.json and server.log go")
    parser.add_argument("--repos", type=Path, help="folder of the model repositories to serve (see --build)")
    parser.add_argument("--build", type=Path, metavar="DIR", help="only build the proof's repositories into DIR")
    parser.add_argument("--onnx", type=Path, help="detector for --build (default: the bundled demo)")
    parser.add_argument("--dry-run", action="store_true", help="with --build: every repository with the CPU "
                        "preprocess, to run the proof where there is no GPU")
    parser.add_argument("--stub-pythonpath", default=os.environ.get("PYTHONPATH", ""),
                        help="PYTHONPATH of the Python-backend stubs (numpy < 2 and CuPy 13 first)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each throughput point")
    parser.add_argument("--levels", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64])
    args = parser.parse_args(argv)
    if args.build:
        for path in build_repositories(args.build, args.onnx, "cpu" if args.dry_run else "gpu"):
            print(path)
        return 0
    if args.out is None or args.repos is None:
        parser.error("--out and --repos are required (or --build DIR)")
    args.out.mkdir(parents=True, exist_ok=True)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
