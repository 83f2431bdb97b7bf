#!/usr/bin/env bash
# Device side of the GPU-detector proof (docs/results/gpu/README.md, "GPU detector"). Six calls back to back while
# the machine stays warm (30 s after each call; /tmp stays with it):
#   bash .device/gd/detector_device.sh part N     calls 1-5: keep part N of the packages tar in /tmp/gd/parts
#   bash .device/gd/detector_device.sh check      after part 4: onnxruntime-gpu and numpy 1.26 are complete; open a
#                                                 CUDA session beside numpy 1.26 (what the detector stub does)
#   bash .device/gd/detector_device.sh proof      call 6: install everything, serve, run tools.gpu.detector_proof
# The proof call carries .device/gd/{data,src} (the repositories with their CPU reference, and this branch's code).
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
T=/tmp/gd
OUT=${OUT:-/tmp/gd-out}
mkdir -p "$OUT" "$T/parts" "$T/pay"
t0=$(date +%s)
CUDA_LIBS=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$@"; }

unpack() {  # $1: "partial" keeps going past the truncated member of an incomplete tar
  cat "$T"/parts/part* | tar -x -C "$T/pay" 2>"$T/tar.err"
  [ "$1" = partial ] || { [ -s "$T/tar.err" ] && cat "$T/tar.err" && return 3; }
  [ -d /tmp/ortsite/onnxruntime ] || { mkdir -p /tmp/ortsite && tar -xJf "$T/pay/ort.tar.xz" -C /tmp/ortsite; } || return 3
  [ -d /tmp/np126/numpy ] || pipi /tmp/np126 "$T"/pay/np126/*.whl || return 3
}

case "${1:-}" in
part)
  cp "$G/p$2/part" "$T/parts/part$2" && ls -l "$T/parts" && echo "part $2 kept in $(( $(date +%s) - t0 )) s" ;;
check)
  unpack partial || exit 3
  LD_LIBRARY_PATH=$CUDA_LIBS PYTHONPATH=/tmp/np126:/tmp/ortsite python3 - <<'PY'
import numpy, onnxruntime as ort
model = (b'\x08\x08:;\n\x10\n\x01x\x12\x01y"\x08Identity\x12\x05probeZ\x0f\n\x01x\x12\n\n\x08\x08\x01'
         b'\x12\x04\n\x02\x08\x01b\x0f\n\x01y\x12\n\n\x08\x08\x01\x12\x04\n\x02\x08\x01B\x04\n\x00\x10\r')
session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"device_id": "0"})])
print("numpy", numpy.__version__, "onnxruntime", ort.__version__, ort.get_available_providers(),
      "session on", session.get_providers(), session.run(None, {"x": numpy.ones(1, numpy.float32)}))
PY
  echo "check took $(( $(date +%s) - t0 )) s" ;;
proof)
  unpack full || exit 3
  [ -d /tmp/stub/cupy ] || pipi /tmp/stub "$T"/pay/cupy13/*.whl || exit 3
  [ -d /tmp/site/nvidia/nvimgcodec ] || pipi /tmp/site "$T"/pay/whl/*.whl || exit 3
  S=/tmp/triton-cache/tritonserver-2.51.0-py3.12/tritonserver/bin/tritonserver
  [ -x "$S" ] || { mkdir -p /tmp/triton-cache && tar -xJf "$T"/pay/triton/*.tar.xz -C /tmp/triton-cache; } || exit 3
  # The embedded stub ignores PYTHONPATH: a .pth in the venv prepends TDE_STUB_PYTHONPATH where it is set.
  SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo 'import os, sys; sys.path[0:0] = [p for p in os.environ.get("TDE_STUB_PYTHONPATH", "").split(os.pathsep) if p]' \
    > "$SP/tde_stub_path.pth"
  # The venv's SciPy needs numpy 2 and CuPy 13 imports SciPy when it can: hide it (CuPy takes an ImportError).
  mkdir -p /tmp/noscipy/scipy && echo 'raise ImportError("SciPy hidden: the one here needs numpy 2")' > /tmp/noscipy/scipy/__init__.py
  echo "setup took $(( $(date +%s) - t0 )) s"
  STUB=/tmp/noscipy:/tmp/np126:/tmp/stub:/tmp/site:/tmp/ortsite
  export LD_LIBRARY_PATH=$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TRITON_DETECTION_CACHE=/tmp/triton-cache PYTHONUNBUFFERED=1
  cd "$G/src" && timeout "${PROOF_TIMEOUT:-540}" python3 -m tools.gpu.detector_proof --data "$G/data" --out "$OUT" \
    --stub-pythonpath "$STUB" --seconds "${SECONDS_PER_POINT:-3}" ${PROOF_ARGS:-} 2>&1 | tee "$OUT/proof.log" \
    | grep -v "^I1\|^W1"
  tail -c 15000000 "$OUT/server.log" > "$OUT/server-tail.log" 2>/dev/null && rm -f "$OUT/server.log"
  echo "proof call took $(( $(date +%s) - t0 )) s" ;;
*)
  echo "usage: $0 part N | check | proof"; exit 2 ;;
esac
