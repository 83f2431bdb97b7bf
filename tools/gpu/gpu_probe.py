"""One-call probe of the GPU preprocess on a GPU host: throughput, pixel agreement, fallbacks, carried server.

Run on the device machine (see docs/results/gpu/README.md for the carried files and the command)::

    python -m tools.gpu.gpu_probe --out DIR [--triton-cache DIR] [--numpy1 DIR]

Sections, each recorded even when another fails: decode throughput per nvImageCodec backend and batch
size (against OpenCV on one core), letterbox kernel time, the whole GPU ``prepare_batch``, pixel
agreement with the CPU path (reduced decode on and off) for camera-sized JPEGs and every accepted format,
the bad-image messages, EXIF orientations, the GPU-only tests, whether CuPy / OpenCV / nvImageCodec import
beside numpy 1.26 (what the Triton 2.51 Python-backend stub needs), Triton's CUDA 12.6 runtime beside CuPy's
CUDA 13 in one process, and the carried Triton server (``--help``, then the project's embedded server on an
empty repository). Writes ``probe.json`` (and ``pytest.txt``) into ``--out``; prints a short summary.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from generator.serving.batch import prepare_batch
from generator.serving.gpu.decode import DecoderOptions, GpuJpegDecoder
from generator.serving.gpu.geometry import plan_image
from generator.serving.images import ImageHeader, reduction_factor
from loadtest.images import synthetic_images
from tests.fixtures.image_corpus import bad_images, corrupt_scan, encode, with_exif, zoo

TARGET = (640, 640)
SIZES = ((1280, 720), (1920, 1080))
BATCHES = (1, 8, 32)
# Decoder settings timed for throughput: (label, options).
DECODERS = (
    ("hardware", DecoderOptions(backend="hardware")),
    ("cuda threads=1", DecoderOptions(backend="cuda")),
    ("cuda threads=1 gpu-huffman", DecoderOptions(backend="cuda", gpu_huffman=True)),
    ("cuda threads=4", DecoderOptions(backend="cuda", cpu_threads=4)),
    ("auto hw=0.9", DecoderOptions(backend="auto", hardware_load=0.9)),
    ("auto hw=0.65", DecoderOptions(backend="auto", hardware_load=0.65)),
    ("auto hw=0.65 threads=4", DecoderOptions(backend="auto", hardware_load=0.65, cpu_threads=4)),
    ("auto adaptive", DecoderOptions(backend="auto", adaptive_load=True)),
)
# Settings for the whole GPU prepare_batch.
PREPROCESS = (
    ("hardware", DecoderOptions(backend="hardware")),
    ("auto", DecoderOptions(backend="auto")),
    ("auto adaptive threads=4", DecoderOptions(adaptive_load=True, cpu_threads=4)),
)


def timed(step: Callable[[], object], seconds: float, warmup: int = 2) -> tuple[int, float]:
    """Run ``step`` ``warmup`` times, then for about ``seconds``; return (runs, elapsed seconds)."""
    for _ in range(warmup):
        step()
    runs, start = 0, time.perf_counter()
    while True:
        step()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return runs, elapsed


def diff_stats(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    if a.shape != b.shape:
        return {"shape_mismatch": 1.0}
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return {"max": int(d.max()), "mean": round(float(d.mean()), 4), "p99": float(np.percentile(d, 99)),
            "nonzero_share": round(float((d > 0).mean()), 4)}


class Probe:
    """Named sections of a device run, each recorded (or its error) and saved as soon as it ends."""

    def __init__(self, out: Path, filename: str = "probe.json") -> None:
        self.out = out
        self.path = out / filename
        self.results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def section(self, name: str, body: Callable[[], Any]) -> None:
        start = time.perf_counter()
        try:
            self.results[name] = body()
        except Exception as exc:  # noqa: BLE001 -- record and go on: one section must not cost the rest
            self.results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        print(f"== {name}: {time.perf_counter() - start:.1f} s", flush=True)
        self.save()

    def save(self) -> None:
        self.path.write_text(json.dumps(self.results, indent=1, default=str))


def environment() -> dict[str, Any]:
    import cupy

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True, check=False).stdout.strip()
    from nvidia import nvimgcodec

    return {
        "gpu": smi, "python": platform.python_version(), "numpy": np.__version__, "opencv": cv2.__version__,
        "cupy": cupy.__version__, "cuda_runtime_cupy": cupy.cuda.runtime.runtimeGetVersion(),
        "cuda_driver": cupy.cuda.runtime.driverGetVersion(), "nvimgcodec": getattr(nvimgcodec, "__version__", "?"),
        "cpu_count": os.cpu_count(), "cpu": platform.processor(),
    }


def camera_jpegs(per_size: int = 32) -> dict[tuple[int, int], list[bytes]]:
    return {size: synthetic_images([size], per_size=per_size, seed=size[0]) for size in SIZES}


def decode_throughput(jpegs: dict[tuple[int, int], list[bytes]]) -> dict[str, Any]:
    import cupy

    stream = cupy.cuda.get_current_stream()
    results: dict[str, Any] = {}
    for label, options in DECODERS:
        try:
            decoder = GpuJpegDecoder(options)
        except Exception as exc:  # noqa: BLE001
            results[label] = {"error": str(exc)}
            continue
        for size, images in jpegs.items():
            first = decoder.decode(images[:4], stream.ptr)
            stream.synchronize()
            key = f"{label} {size[0]}x{size[1]}"
            results[key] = {"decoded_of_4": sum(r is not None for r in first)}
            for batch in BATCHES:
                cursor = [0]

                def step(batch: int = batch, images: list[bytes] = images, cursor: list[int] = cursor,
                         decoder: GpuJpegDecoder = decoder) -> None:
                    start = cursor[0] % len(images)
                    chunk = (images * 2)[start : start + batch]
                    cursor[0] += batch
                    decoder.decode(chunk, stream.ptr)
                    stream.synchronize()

                runs, elapsed = timed(step, 0.4)
                results[key][f"batch{batch}_img_s"] = round(runs * batch / elapsed, 1)
    # OpenCV on one core, for the ">= 20x one CPU core" target.
    cv2.setNumThreads(1)
    for size, images in jpegs.items():
        for label, flag in (("full", cv2.IMREAD_COLOR), ("reduced2", cv2.IMREAD_REDUCED_COLOR_2)):
            buffers = [np.frombuffer(d, np.uint8) for d in images]
            cursor = [0]

            def cpu_step(buffers: list[np.ndarray] = buffers, flag: int = flag, cursor: list[int] = cursor) -> None:
                cv2.imdecode(buffers[cursor[0] % len(buffers)], flag)
                cursor[0] += 1

            runs, elapsed = timed(cpu_step, 0.6)
            results[f"opencv-1-core {size[0]}x{size[1]} {label}_img_s"] = round(runs / elapsed, 1)
    return results


def letterbox_timing(jpegs: dict[tuple[int, int], list[bytes]]) -> dict[str, Any]:
    import cupy

    from generator.serving.gpu.letterbox import GpuLetterbox

    stream = cupy.cuda.get_current_stream()
    decoder = GpuJpegDecoder(DecoderOptions())
    kernel = GpuLetterbox()
    results: dict[str, Any] = {}
    for size, images in jpegs.items():
        decoded = [d for d in decoder.decode(images[:32], stream.ptr) if d is not None]
        stream.synchronize()
        header = ImageHeader("jpeg", size[0], size[1])
        for factor in sorted({1, reduction_factor(header, TARGET)}):
            plans = [plan_image(d.width, d.height, TARGET, factor) for d in decoded]
            out = cupy.empty((len(decoded), *TARGET, 3), dtype=cupy.uint8)
            times = []
            for i in range(25):
                begin, end = cupy.cuda.Event(), cupy.cuda.Event()
                begin.record()
                kernel(decoded, plans, list(range(len(decoded))), out)
                end.record()
                end.synchronize()
                if i >= 5:
                    times.append(cupy.cuda.get_elapsed_time(begin, end))
            host_start = time.perf_counter()
            for _ in range(20):
                kernel(decoded, plans, list(range(len(decoded))), out)
            stream.synchronize()
            host_ms = (time.perf_counter() - host_start) / 20 * 1000
            results[f"{size[0]}x{size[1]} factor{factor} batch{len(decoded)}"] = {
                "kernel_ms_median": round(statistics.median(times), 4),
                "per_image_us": round(statistics.median(times) * 1000 / len(decoded), 2),
                "launch_incl_host_ms": round(host_ms, 4),
            }
    return results


def end_to_end(jpegs: dict[tuple[int, int], list[bytes]]) -> dict[str, Any]:
    from generator.serving.gpu import GpuPreprocessor

    results: dict[str, Any] = {}
    for label, options in PREPROCESS:
        for reduced in (True, False):
            try:
                pre = GpuPreprocessor(TARGET, reduced_decode=reduced, decoder=options)
            except Exception as exc:  # noqa: BLE001
                results[label] = {"error": str(exc)}
                break
            for size, images in jpegs.items():
                for batch in (8, 32):
                    cursor = [0]

                    def step(batch: int = batch, images: list[bytes] = images, cursor: list[int] = cursor,
                             pre: Any = pre) -> None:
                        start = cursor[0] % len(images)
                        cursor[0] += batch
                        pre.prepare_batch((images * 2)[start : start + batch])

                    runs, elapsed = timed(step, 0.5)
                    key = f"{label} reduced={reduced} {size[0]}x{size[1]} batch{batch}_img_s"
                    results[key] = round(runs * batch / elapsed, 1)
    return results


def compare(pre: Any, encoded: Sequence[bytes], names: Sequence[str], reduced: bool) -> dict[str, Any]:
    gpu = pre.prepare_batch(list(encoded))
    cpu = prepare_batch(list(encoded), TARGET, reduced_decode=reduced)
    images = gpu.images.get()
    rows: dict[str, Any] = {}
    for slot, position in enumerate(gpu.index):
        row: dict[str, Any] = dict(diff_stats(images[slot], cpu.images[cpu.index.index(position)])
                                   if position in cpu.index else {"cpu_rejected": True})
        row["decoded_on"] = "cpu:" + gpu.cpu_path[position] if position in gpu.cpu_path else "gpu"
        rows[names[position]] = row
    for position, message in gpu.errors.items():
        rows[names[position]] = {"error": message, "cpu_error": cpu.errors.get(position),
                                 "same_message": message == cpu.errors.get(position),
                                 "decoded_on": "cpu:" + gpu.cpu_path.get(position, "header")}
    return {"index_equal": gpu.index == cpu.index, "errors_equal": gpu.errors == cpu.errors,
            "params_equal": bool(np.array_equal(gpu.letterbox, cpu.letterbox)) if gpu.index == cpu.index else False,
            "images": rows}


def decode_bgr(data: bytes) -> np.ndarray:
    """cv2.imdecode of an image the probe made itself (OpenCV 5 types it as possibly None)."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("OpenCV could not decode a probe image")
    return image


def cmyk_jpeg() -> bytes | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    import io

    rgb = cv2.cvtColor(decode_bgr(zoo()["png"]), cv2.COLOR_BGR2RGB)
    buffer = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def pixel_agreement(jpegs: dict[tuple[int, int], list[bytes]]) -> dict[str, Any]:
    from generator.serving.gpu import GpuPreprocessor

    names: list[str] = []
    encoded: list[bytes] = []
    for size, images in jpegs.items():
        for i in range(4):
            names.append(f"camera-{size[0]}x{size[1]}-{i}")
            encoded.append(images[i])
    for name, data in zoo().items():
        names.append(name)
        encoded.append(data)
    for orientation in range(1, 9):
        names.append(f"jpeg-1280x720-exif{orientation}")
        encoded.append(with_exif(jpegs[SIZES[0]][5], orientation))
    names.append("jpeg-corrupt-scan")
    encoded.append(corrupt_scan(jpegs[SIZES[0]][6]))
    cmyk = cmyk_jpeg()
    if cmyk is not None:
        names.append("jpeg-cmyk")
        encoded.append(cmyk)
    names.append("jpeg-q50-odd-size")
    encoded.append(encode(decode_bgr(jpegs[SIZES[1]][7])[:1077, :1917],
                          ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 50]))
    for name, data in bad_images().items():
        names.append(name)
        encoded.append(data)
    results: dict[str, Any] = {}
    for backend in ("hardware", "cuda", "auto"):
        for fancy in (True, False) if backend == "cuda" else (True,):
            options = DecoderOptions(backend=backend, fancy_upsampling=fancy)
            for reduced in (False, True):
                key = f"{backend} fancy={fancy} reduced={reduced}"
                try:
                    pre = GpuPreprocessor(TARGET, reduced_decode=reduced, decoder=options)
                    results[key] = compare(pre, encoded, names, reduced)
                except Exception as exc:  # noqa: BLE001 -- e.g. no hardware decoder: the other settings still run
                    results[key] = {"error": f"{type(exc).__name__}: {exc}"}
    # The GPU's full-size resize against the CPU's reduced decode: what skipping the block average would cost.
    try:
        pre = GpuPreprocessor(TARGET, reduced_decode=False)
        gpu = pre.prepare_batch(encoded[:8])
        cpu = prepare_batch(encoded[:8], TARGET, reduced_decode=True)
        images = gpu.images.get()
        results["gpu-full-resize vs cpu-reduced"] = {names[p]: diff_stats(images[s], cpu.images[s])
                                                     for s, p in enumerate(gpu.index)}
    except Exception as exc:  # noqa: BLE001
        results["gpu-full-resize vs cpu-reduced"] = {"error": f"{type(exc).__name__}: {exc}"}
    return results


def decoder_vs_opencv(jpegs: dict[tuple[int, int], list[bytes]]) -> dict[str, Any]:
    """Full-resolution decodes: nvImageCodec per backend against cv2.imdecode."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    samples = {"1280x720": jpegs[SIZES[0]][0], "1920x1080": jpegs[SIZES[1]][0], **{
        k: v for k, v in zoo().items() if k.startswith("jpeg")}}
    results: dict[str, Any] = {}
    for backend in ("hardware", "cuda"):
        for fancy in (True, False):
            try:
                decoder = GpuJpegDecoder(DecoderOptions(backend=backend, fancy_upsampling=fancy))
            except Exception as exc:  # noqa: BLE001
                results[f"{backend} fancy={fancy}"] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            decoded = decoder.decode(list(samples.values()), stream.ptr)
            stream.synchronize()
            rows: dict[str, Any] = {}
            for (name, data), image in zip(samples.items(), decoded, strict=True):
                if image is None:
                    rows[name] = "not decoded"
                    continue
                host = np.asarray(image.handle.cpu())
                rows[name] = diff_stats(host, decode_bgr(data))
            results[f"{backend} fancy={fancy}"] = rows
    return results


def bad_image_messages() -> dict[str, Any]:
    from generator.serving.gpu import GpuPreprocessor

    bad = bad_images()
    encoded = list(bad.values())
    gpu = GpuPreprocessor(TARGET).prepare_batch(encoded)
    cpu = prepare_batch(encoded, TARGET)
    return {"equal": gpu.errors == cpu.errors and gpu.index == cpu.index,
            "messages": {name: {"gpu": gpu.errors.get(i), "cpu": cpu.errors.get(i)} for i, name in enumerate(bad)}}


def device_tests(out: Path) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-m", "pytest", "--noconftest", "-q", "-p", "no:cacheprovider", "-rs",
                             "tests/generator/serving/gpu"], cwd=root, capture_output=True, text=True, check=False)
    (out / "pytest.txt").write_text(result.stdout[-20000:] + result.stderr[-5000:])
    return {"returncode": result.returncode, "summary": result.stdout.strip().splitlines()[-1:]}


def numpy1_imports(numpy1: Path) -> dict[str, Any]:
    """Each library imported (and used a little) in a fresh interpreter whose numpy is 1.26."""
    checks = {
        "numpy": "import numpy; print(numpy.__version__)",
        "cupy": "import cupy, numpy; a = cupy.arange(10); print(cupy.__version__, int(a.sum()), "
                "cupy.asnumpy(a).dtype)",
        "cupy-dlpack": "import cupy, numpy; a = cupy.arange(6, dtype=cupy.uint8); "
                       "b = cupy.from_dlpack(a.__dlpack__()); print(int(b.sum()))",
        "opencv": "import cv2, numpy; ok, buf = cv2.imencode('.jpg', numpy.zeros((8, 8, 3), numpy.uint8)); "
                  "print(cv2.__version__, cv2.imdecode(buf, 1).shape, cv2.resize(numpy.zeros((4, 4, 3), "
                  "numpy.uint8), (2, 2)).shape)",
        "nvimgcodec": "from nvidia import nvimgcodec; import numpy; print(nvimgcodec.__version__)",
        "gpu-preprocess": "from generator.serving.gpu import GpuPreprocessor; from tests.fixtures.image_corpus import zoo; "
                          "b = GpuPreprocessor((64, 64)).prepare_batch(list(zoo().values())); "
                          "print(b.images.shape, sorted(set(b.cpu_path.values())))",
    }
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(numpy1), env.get("PYTHONPATH", "")])
    results = {}
    for name, code in checks.items():
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False,
                             cwd=Path(__file__).resolve().parents[1], timeout=120)
        results[name] = {"ok": run.returncode == 0, "out": (run.stdout + run.stderr).strip()[-600:]}
    return results


def two_cuda_runtimes(triton: Path) -> dict[str, Any]:
    """Triton's libcudart 12.6 in the process that runs CuPy (CUDA 13): both see the same memory."""
    import cupy

    libs = sorted((triton / "libs").glob("libcudart-*.so.12*"))
    if not libs:
        return {"error": "no libcudart 12 in the carried server"}
    cudart = ctypes.CDLL(str(libs[0]))
    version = ctypes.c_int()
    cudart.cudaRuntimeGetVersion(ctypes.byref(version))
    data = cupy.arange(1 << 20, dtype=cupy.uint8) * 3
    host = np.empty(1 << 20, dtype=np.uint8)
    cupy.cuda.get_current_stream().synchronize()
    status = cudart.cudaMemcpy(host.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(int(data.data.ptr)),
                               ctypes.c_size_t(host.nbytes), 2)  # cudaMemcpyDeviceToHost
    return {"cudart12_version": version.value, "memcpy_status": status,
            "bytes_equal": bool(np.array_equal(host, cupy.asnumpy(data)))}


def triton_server(cache: Path) -> dict[str, Any]:
    install = cache / "tritonserver-2.51.0-py3.12"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(install / "libs"), env.get("LD_LIBRARY_PATH")]))
    results: dict[str, Any] = {}
    for name, binary in (("tritonserver", install / "tritonserver/bin/tritonserver"),
                         ("stub", install / "tritonserver/backends/python/triton_python_backend_stub")):
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=env, check=False).stdout
        results[f"{name}_unresolved"] = [line.strip() for line in ldd.splitlines() if "not found" in line]
        results[f"{name}_libpython"] = [line.strip() for line in ldd.splitlines() if "libpython" in line]
    helped = subprocess.run([str(install / "tritonserver/bin/tritonserver"), "--help"], capture_output=True,
                            text=True, env=env, check=False, timeout=60)
    results["help_returncode"] = helped.returncode
    results["help_head"] = (helped.stdout or helped.stderr).splitlines()[:8]
    # The project's own embedded server, finding the carried install in TRITON_DETECTION_CACHE.
    os.environ["TRITON_DETECTION_CACHE"] = str(cache)
    from generator.server.embedded import EmbeddedServer, ensure_server

    results["ensure_server"] = str(ensure_server().root)
    with tempfile.TemporaryDirectory() as repo:
        log = Path(repo) / "server.log"
        server = EmbeddedServer(Path(repo), log_file=log)
        start = time.perf_counter()
        try:
            server.start()
            server.wait_ready(timeout_s=30)
            results["ready_after_s"] = round(time.perf_counter() - start, 2)
        except Exception as exc:  # noqa: BLE001
            results["start_error"] = str(exc)
        finally:
            results["stop_returncode"] = server.stop()
        text = log.read_text(errors="replace") if log.exists() else ""
        results["server_log"] = [line for line in text.splitlines()
                                 if any(k in line for k in ("CUDA", "GPU", "Started", "error", "Error", "version"))][:20]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--triton-cache", type=Path, help="TRITON_DETECTION_CACHE holding the carried server")
    parser.add_argument("--numpy1", type=Path, help="a --target directory holding numpy 1.26")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    probe = Probe(args.out)
    probe.section("environment", environment)
    if args.triton_cache:  # quick checks first: a run cut short at its time limit still returns them
        cache = args.triton_cache
        probe.section("two_cuda_runtimes", lambda: two_cuda_runtimes(cache / "tritonserver-2.51.0-py3.12"))
        probe.section("triton_server", lambda: triton_server(cache))
    if args.numpy1:
        probe.section("numpy1_imports", lambda: numpy1_imports(args.numpy1))
    probe.section("bad_images", bad_image_messages)
    jpegs = camera_jpegs()
    probe.results["corpus"] = {f"{s[0]}x{s[1]}": {"count": len(v), "mean_bytes": int(np.mean([len(d) for d in v]))}
                               for s, v in jpegs.items()}
    probe.section("decode_throughput", lambda: decode_throughput(jpegs))
    probe.section("letterbox_kernel", lambda: letterbox_timing(jpegs))
    probe.section("prepare_batch_throughput", lambda: end_to_end(jpegs))
    probe.section("decoder_vs_opencv", lambda: decoder_vs_opencv(jpegs))
    probe.section("pixel_agreement", lambda: pixel_agreement(jpegs))
    probe.section("device_tests", lambda: device_tests(args.out))
    probe.results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    probe.save()
    print(json.dumps({k: probe.results.get(k) for k in ("decode_throughput", "prepare_batch_throughput")},
                     indent=None, default=str)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
