#!/usr/bin/env bash
# Device call 2 of the GPU proof (within 30 s of call 1, same warm machine): install the carried wheels, unpack
# the carried Triton 2.51, serve the prebuilt repositories and run loadtest.gpu_proof, the GPU tests and the
# library throughput under numpy 1.26 + CuPy 13.6. Carry .device/gpu/{whl,np126,triton,src,repos,proof2.sh}.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/proof-out}
mkdir -p "$OUT"
t0=$(date +%s)
[ -d /tmp/stub/cupy ] || { echo "CuPy 13 is not in /tmp/stub: run proof1.sh on this machine first"; exit 3; }
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$@"; }
[ -d /tmp/site/nvidia/nvimgcodec ] || pipi /tmp/site "$G"/whl/*.whl || exit 3
[ -d /tmp/np126/numpy ] || pipi /tmp/np126 "$G"/np126/*.whl || exit 3
T=/tmp/triton-cache/tritonserver-2.51.0-py3.12/tritonserver/bin/tritonserver
[ -x "$T" ] || { mkdir -p /tmp/triton-cache && tar -xJf "$G"/triton/tritonserver-2.51.0-py3.12.tar.xz -C /tmp/triton-cache; } || exit 3
# The embedded stub ignores PYTHONPATH: a .pth in the venv prepends TDE_STUB_PYTHONPATH where it is set.
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo 'import os, sys; sys.path[0:0] = [p for p in os.environ.get("TDE_STUB_PYTHONPATH", "").split(os.pathsep) if p]' \
  > "$SP/tde_stub_path.pth"
# The venv's SciPy needs numpy 2 and CuPy 13 imports SciPy when it can: hide it (CuPy takes an ImportError).
mkdir -p /tmp/noscipy/scipy && echo 'raise ImportError("SciPy hidden: the one here needs numpy 2")' > /tmp/noscipy/scipy/__init__.py
echo "setup took $(( $(date +%s) - t0 )) s"
STUB=/tmp/noscipy:/tmp/np126:/tmp/stub:/tmp/site
export TRITON_DETECTION_CACHE=/tmp/triton-cache PYTHONUNBUFFERED=1
cd "$G/src"
python3 -m loadtest.gpu_proof --out "$OUT" --repos "$G/repos" --stub-pythonpath "$STUB" --seconds 3 2>&1 \
  | tee "$OUT/proof.log" | grep -v "^I1\|^W1"
echo "proof done at $(( $(date +%s) - t0 )) s"
[ "${EXTRA:-1}" = 1 ] || exit 0  # EXTRA=0: the proof alone
PYTHONPATH="$STUB:$G/src" timeout 120 python3 -m pytest --noconftest -q -p no:cacheprovider -rs \
  tests/generator/serving/gpu > "$OUT/pytest-gpu.txt" 2>&1; tail -3 "$OUT/pytest-gpu.txt"
PYTHONPATH="$STUB:$G/src" timeout 120 python3 -c "
import json; from loadtest.gpu_probe import camera_jpegs, end_to_end
json.dump(end_to_end(camera_jpegs()), open('$OUT/library.json', 'w'), indent=1)" 2>&1 | tail -5
echo "call 2 took $(( $(date +%s) - t0 )) s"
