#!/usr/bin/env bash
# Device call 1 of the GPU proof: install the carried CuPy 13.6 into /tmp/stub (kept while the machine stays
# warm) and check how it finds CUDA. Carry .device/gpu/{cupy13,proof1.sh}; run: bash .device/gpu/proof1.sh
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/stub "$G"/cupy13/*.whl || exit 3
echo "cupy 13 installed in $(( $(date +%s) - t0 )) s"
PYTHONPATH=/tmp/stub python3 - <<'PY' 2>&1 | tail -25
import numpy, cupy
print("cupy", cupy.__version__, "numpy", numpy.__version__, "runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "driver", cupy.cuda.runtime.driverGetVersion(), "devices", cupy.cuda.runtime.getDeviceCount())
a = cupy.arange(12, dtype=cupy.int32)
k = cupy.RawKernel(r'extern "C" __global__ void f(int* x) { x[threadIdx.x] += 1; }', "f")
k((1,), (12,), (a,))
print("raw kernel", int(a.sum()), "dlpack", int(cupy.from_dlpack(a).sum()))
PY
for f in /tmp/stub/cupy_backends/cuda/api/runtime*.so /tmp/stub/cupy/cuda/memory*.so; do ldd "$f" | grep -E "cuda|nvrtc|not found"; done
ldconfig -p | grep -E "libcudart|libnvrtc|libcuda\.so" | head -8
python3 -m pip show onnxruntime opencv-python-headless 2>/dev/null | grep -E "^(Name|Version|Requires)"
echo "call 1 took $(( $(date +%s) - t0 )) s"
