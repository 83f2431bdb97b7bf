#!/usr/bin/env bash
# Stage what the GPU-detector proof carries to the lent H200 (docs/results/gpu/README.md, "GPU detector").
# Run here, from a worktree of this branch:  bash tools/gpu/detector_carry.sh CHECKOUT YOLOV8N_ONNX
# CHECKOUT is the checkout the device tool sends (its .git/info/exclude must hold /.device/); everything lands
# in CHECKOUT/.device/gd: p1..p5 (the packages tar, split under the 64 MiB a call carries), data (repositories
# and their CPU reference), src (this branch's code) and detector_device.sh.
set -euo pipefail
CHECKOUT=$(cd "$1" && pwd); YOLOV8N=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
HERE=$(cd "$(dirname "$0")/../.." && pwd)
D=$CHECKOUT/.device/dl; G=$CHECKOUT/.device/gd
PART=${PART:-58M}
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
mkdir -p "$D" "$G"
pip_get() { [ -n "$(ls "$D/$1" 2>/dev/null)" ] || python3 -m pip download -q $P -d "$D/$1" "${@:2}"; }
pip_get ort onnxruntime-gpu==1.31.1
pip_get np126 numpy==1.26.4
pip_get cupy13 cupy-cuda13x==13.6.0 fastrlock==0.8.3
pip_get whl nvidia-nvjpeg==13.3.2.43 nvidia-nvimgcodec-cu13==0.9.0.20
pip_get pt --platform manylinux_2_35_x86_64 nvidia-pytriton==0.5.13

# onnxruntime-gpu without its TensorRT provider, libonnxruntime.so (the Python module does not load it) and the
# transformers/quantization/tools folders: 302 MB unpacked, 185 MiB as xz.
if [ ! -s "$D/ort.tar.xz" ]; then
  rm -rf "$D/ortx" && mkdir "$D/ortx"
  unzip -q "$D"/ort/onnxruntime_gpu-*.whl -d "$D/ortx" -x 'onnxruntime/capi/libonnxruntime_providers_tensorrt.so' \
    'onnxruntime/capi/libonnxruntime.so*' 'onnxruntime/transformers/*' 'onnxruntime/quantization/*' 'onnxruntime/tools/*'
  tar -C "$D/ortx" -cf - onnxruntime onnxruntime_gpu-1.31.1.dist-info | xz -9e -T2 > "$D/ort.tar.xz"
fi
# nvImageCodec with the CPython 3.12 module, its core library and the nvJPEG extension only (as in the first proof).
python3 "$HERE/tools/gpu/slim_wheel.py" "$D"/whl/nvidia_nvimgcodec_cu13-0.9.0.20-py3-none-*.whl "$D/slim" \
  nvidia/__init__.py nvidia/nvimgcodec/__init__.py nvidia/nvimgcodec/libnvimgcodec.so.0 \
  nvidia/nvimgcodec/nvimgcodec_impl.cpython-312-x86_64-linux-gnu.so nvidia/nvimgcodec/extensions/libnvjpeg_ext.so.0.9.0
# Triton 2.51 as the project unpacks it for Python 3.12, without the other Pythons' stubs.
if [ ! -s "$D/tritonserver-2.51.0-py3.12.tar.xz" ]; then
  rm -rf "$D/stage"
  python3 -c "import sys; from pathlib import Path; sys.path.insert(0, '$HERE'); \
from generator.server.embedded import _unpack; \
_unpack(next(Path('$D/pt').glob('*.whl')), Path('$D/stage/tritonserver-2.51.0-py3.12'), '3.12')"
  rm -r "$D/stage/tritonserver-2.51.0-py3.12/tritonserver/python_backend_stubs"
  tar -C "$D/stage" -cf - tritonserver-2.51.0-py3.12 | xz -9e -T2 > "$D/tritonserver-2.51.0-py3.12.tar.xz"
fi

# One tar, onnxruntime and numpy first (complete after part 4: the check call), split into parts.
rm -rf "$D/pay" && mkdir -p "$D/pay/np126" "$D/pay/cupy13" "$D/pay/whl" "$D/pay/triton"
ln "$D/ort.tar.xz" "$D/pay/ort.tar.xz"
ln "$D"/np126/*.whl "$D/pay/np126/"; ln "$D"/cupy13/*.whl "$D/pay/cupy13/"
ln "$D"/slim/*.whl "$D"/whl/nvidia_nvjpeg-*.whl "$D/pay/whl/"; ln "$D"/tritonserver-*.tar.xz "$D/pay/triton/"
rm -rf "$G"/p[0-9] "$D/split" && mkdir "$D/split"
tar -C "$D/pay" -cf - ort.tar.xz np126 cupy13 whl triton | split -b "$PART" -d -a 1 - "$D/split/part"
for f in "$D"/split/part*; do n=$(( ${f##*part} + 1 )); mkdir -p "$G/p$n"; mv "$f" "$G/p$n/part"; done

# The repositories (served graphs stored once) with their CPU reference (kept unless REBUILD=1), and this
# branch's code.
if [ "${REBUILD:-0}" = 1 ] || [ ! -s "$G/data/reference.json" ]; then
  rm -rf "$G/data" && (cd "$HERE" && python -m tools.gpu.detector_repos --out "$G/data" --yolov8n "$YOLOV8N")
fi
rm -rf "$G/src" && mkdir -p "$G/src"
git -C "$HERE" archive HEAD generator loadtest tools tests/__init__.py tests/fixtures pyproject.toml | tar -x -C "$G/src"
cp "$HERE/tools/gpu/detector_device.sh" "$G/"
du -sh "$G"/* | sed "s|$CHECKOUT/||"
