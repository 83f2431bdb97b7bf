#!/usr/bin/env bash
# The H200 proof through the project's own commands on a machine with no package index (issue 28).
# README.md beside this file ("The offline run") has the call plan; in short:
#
#   here (connected, repository root):  bash tools/gpu/offline_run.sh prepare   [DRY=1: CPU, this machine]
#   device calls 1..K-1:                bash tools/gpu/offline_run.sh keep      carry what `prepare` printed
#   device call K:                      bash tools/gpu/offline_run.sh install   carry the last part
#   device call K+1:                    bash tools/gpu/offline_run.sh main      carry nothing
#   device call K+2:                    bash tools/gpu/offline_run.sh more      carry nothing
#   device call K+3 (VERSUS_ONNX given): bash tools/gpu/offline_run.sh versus  carry nothing (install carried it)
#   device call K+4 (REPOS has y11_d4, y11_p4): bash tools/gpu/offline_run.sh bound   carry nothing
#   any device call (VERSUS_ONNX given):  bash tools/gpu/offline_run.sh probe   carry .device/run/versus, or nothing
#                                         after install (CORES="4 2 1": tools/gpu/spin_probe.py pinned to each)
#
# STUBS=cpu VERSUS_ONNX=PATH ... prepare: only what `versus` needs (issue 27, CPU only): the cpu stub environment
# (STUBS=cpu,openvino adds OpenVINO's, for VARIANT_ARGS="--cpu-engine openvino")
# and the runtime for build, client and loadtest, no GPU repositories; the calls are then the parts, install and
# versus (CORES=1,2,4,... picks the core counts, SPIN=1 builds with --detector-spinning, BUILD_ARGS="..." any other
# variant, VARIANT_ARGS="..." a second build paired with the first in the same rounds, WINDOW the seconds per window,
# LABEL the results' name; VERSUS_WHEELS=DIR at prepare carries Ultralytics' wheels for its predict column, issue 35).
#
# The device gets the checkout the session started in, not a helper's worktree. A helper stages its code there:
# STAGE_IN=.device/NAME bash tools/gpu/offline_run.sh plan prints the calls for a copy of its tools, generator,
# loadtest and clients (git archive) and its .device/run under that ignored folder of the session's checkout: each
# call carries the code beside its part and runs from there (PART_MIB sizes the parts so that both fit).
#
# `prepare` writes the offline archive (python -m generator archive) in parts sized to what one call carries beside
# the working tree, one folder per call, and builds the repositories the run serves (python -m generator build).
# `install` joins nothing by hand: python -m generator serve --prepare --from-archive verifies and installs the
# parts; `main` then measures with generator serve, loadtest bench, loadtest engine and loadtest run while the GPU
# series are scraped, and `more` adds the FP16/INT8 agreement, the INT8 load check and tools/tradeoff.py.
# Each call leaves two files in $OUT: <call>-summary.md and <call>.tar.gz. DRY=1 rehearses the same on this
# machine's CPU (CPU repositories, an archive for this Python): tools/gpu/offline_rehearse.sh runs every call under
# `unshare -n` with only what it carries.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
W=.device/run
T=${TDE_TMP:-${TMPDIR:-/tmp}/tde}
OUT=${OUT:-$T/out}
DRY=${DRY:-0}
PY=${PY:-python3}
export TRITON_DETECTION_CACHE=$T/cache PYTHONUNBUFFERED=1
export TRITON_ADMIN_TOKEN=${TRITON_ADMIN_TOKEN:-offline-run-admin-key-28}
t0=$(date +%s)
since() { echo $(( $(date +%s) - t0 )); }

# --- here ----------------------------------------------------------------------------------------------------
build_repos() {  # the repositories the run serves (REPOS, default: demo and y11 in FP32, FP16, INT8), built with
  # the project's command into $W/data; y11_d4 and y11_p4 are y11 with four detector or four preprocess instances
  local inst=(2 2 2) d4=(2 4 2) p4=(4 2 2) d3=(2 3 2) dev=(--device gpu --preprocess-device gpu)
  [ "$DRY" = 1 ] && { inst=(1 1 1); d4=(1 2 1); p4=(2 1 1); d3=(1 2 1); dev=(--device cpu --preprocess-device cpu); }
  # Capacity is measured: queues deep enough that nothing is shed (overload is proven elsewhere).
  local common=("${dev[@]}" --max-batch 32 --max-queue-ms 10000 --service-ms 10 --force)
  "$PY" -c "import onnx; from tests.fixtures.ultralytics import load; onnx.save(load('yolo11-dynamic'), '$W/y11.onnx')" &&
    "$PY" -c "from pathlib import Path; from tests.integration.family_matrix import write_calibration_images as w; w(Path('$W/calib'))" ||
    return 1
  local y11=(--onnx "$W/y11.onnx" --imgsz 640 640) name
  for name in ${REPOS:-demo y11 y11_fp16 y11_int8}; do
    local args=()
    case "$name" in
      demo) args=(--instances "${inst[@]}") ;;
      y11) args=("${y11[@]}" --instances "${inst[@]}") ;;
      y11_fp16) args=("${y11[@]}" --instances "${inst[@]}" --precision fp16 --no-validate --speed-gate record) ;;
      y11_int8) args=("${y11[@]}" --instances "${inst[@]}" --precision int8 --calib-images "$W/calib" --no-validate --speed-gate record) ;;
      y11_d4) args=("${y11[@]}" --instances "${d4[@]}" --no-validate) ;;
      y11_p4) args=("${y11[@]}" --instances "${p4[@]}" --no-validate) ;;
      y11_pb) args=("${y11[@]}" --instances "${inst[@]}" --no-validate) ;;
      y11_host) args=("${y11[@]}" --instances "${inst[@]}" --no-validate)
                [ "$DRY" = 1 ] || args+=(--gpu-handoff host) ;;  # a CPU rehearsal has no GPU preprocess
      # y11_dev: the device hand-off, the default before 2026-12-07 (y11 itself is now one fused step)
      y11_dev) args=("${y11[@]}" --instances "${inst[@]}" --no-validate)
               [ "$DRY" = 1 ] || args+=(--gpu-handoff device) ;;
      # y11_fused, y11_fused3: preprocess and detector in one step (--fuse-preprocess on, y11's default since
      # 2026-12-07), 2 or 3 instances of it
      y11_fused) args=("${y11[@]}" --instances "${inst[@]}" --no-validate --fuse-preprocess on) ;;
      y11_fused3) args=("${y11[@]}" --instances "${d3[@]}" --no-validate --fuse-preprocess on) ;;
      # y11_steps: three steps, the GPU preprocess handing its batch over in host memory (y11's default before
      # --fuse-preprocess auto, 2026-12-07)
      y11_steps) args=("${y11[@]}" --instances "${inst[@]}" --no-validate --fuse-preprocess off) ;;
      *) echo "error: no repository named $name"; return 1 ;;
    esac
    "$PY" -m generator build --name "$name" --output "$W/data/$name" "${args[@]}" "${common[@]}" || return 1
    # y11_pb: y11 whose detector prefers batches of its sessions' sizes (issue 35: a batch padded to the next
    # power of two computes up to twice its images); an experiment on the config, before any build option
    if [ "$name" = y11_pb ]; then
      sed -i 's/^  max_queue_delay_microseconds: 0$/&\n  preferred_batch_size: [ 1, 2, 4, 8, 16, 32 ]/' \
        "$W/data/$name/${name}_detector/config.pbtxt" && grep -q preferred_batch_size "$W/data/$name/${name}_detector/config.pbtxt" ||
        { echo "error: no preferred_batch_size in ${name}_detector"; return 1; }
    fi
  done
}

repos() {  # rebuild only the served repositories of an earlier `prepare` (its archive parts stay as they are)
  ls -d "$W"/p[0-9][0-9] > /dev/null 2>&1 || { echo "error: no parts in $W: run prepare first"; return 1; }
  rm -rf "$W/data" && mkdir -p "$W/data" && build_repos || { echo "error: building the repositories failed"; return 1; }
  rm -rf "$W/calib" "$W/y11.onnx"
  plan "$(tree_bytes)" "?"
}

tree_bytes() {  # what every call carries besides its parts: tracked and untracked-not-ignored files
  git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}'
}

prepare() {
  local stubs=${STUBS:-cpu,gpu} runtime=build,client,loadtest,rollout
  local cpu_only=0; [[ "$stubs" != *gpu* ]] && cpu_only=1  # cpu, or cpu,openvino: only what versus needs
  [ $cpu_only = 1 ] && [ -z "${VERSUS_ONNX:-}" ] && { echo "error: STUBS=$stubs prepares versus: give VERSUS_ONNX=PATH"; return 1; }
  local exclude; exclude="$(git rev-parse --git-common-dir)/info/exclude"
  grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"
  rm -rf "$W" && mkdir -p "$W/archive" || return 1
  local tree; tree=$(tree_bytes)
  # 64 MiB a call, less the tree and 1.5 MiB of margin (the last call carries the data too).
  local part_mib=${PART_MIB:-$(( (64 * 1048576 - tree - 1572864) / 1048576 ))}
  [ $cpu_only = 1 ] && runtime=build,client,loadtest  # versus builds, serves and loads; no rollout
  local target=(--stub-env "$stubs" --python 3.12 --machine x86_64 --present tools/gpu/h200-present.txt)
  [ "$DRY" = 1 ] && target=(--stub-env cpu)
  "$PY" -m generator archive "${target[@]}" --schema --runtime "$runtime" --split "${part_mib}M" \
    --output "$W/archive" || return 1
  local n=0 f
  for f in "$W"/archive/*.tar.[0-9][0-9][0-9]-of-*; do
    n=$((n + 1)); mkdir -p "$(printf '%s/p%02d' "$W" "$n")" && mv "$f" "$(printf '%s/p%02d/' "$W" "$n")"
  done
  if [ $cpu_only = 0 ]; then
    mkdir -p "$W/data" && build_repos || { echo "error: building the repositories failed"; return 1; }
  fi
  rm -rf "$W/archive" "$W/calib" "$W/y11.onnx"
  # issue 27's served-vs-in-process benchmark on the host's cores: the exported model it builds and serves
  if [ -n "${VERSUS_ONNX:-}" ]; then mkdir -p "$W/versus" && cp "$VERSUS_ONNX" "$W/versus/model.onnx" || return 1; fi
  # issue 35: Ultralytics' wheels (ultralytics, ultralytics-thop) for its predict column; torch is the device's own
  if [ -n "${VERSUS_WHEELS:-}" ]; then cp "$VERSUS_WHEELS"/*.whl "$W/versus/" || return 1; fi
  plan "$tree" "$part_mib"
}

plan() {  # plan TREE PART_MIB: the device calls, each carrying what fits beside the tree; each extra folder (the
  # served repositories, the versus model) goes with the last part when it fits there, else in a call before it
  local tree=$1 parts=() i extra=() folder alone=() with=()
  local code="" go="" item  # STAGE_IN: the staged copy's code travels with every call, which runs from there
  if [ -n "${STAGE_IN:-}" ]; then
    for item in generator loadtest tools clients; do code+="$STAGE_IN/$item "; done
    tree=$(( tree + $(git archive HEAD generator loadtest tools clients | wc -c) )); go="cd $STAGE_IN \&\& "
  fi
  local budget=$(( 64 * 1048576 - tree - 1572864 ))
  parts=($(ls -d "$W"/p[0-9][0-9]))
  for folder in "$W/data" "$W/versus"; do [ -d "$folder" ] && extra+=("$folder"); done
  local data=0; [ ${#extra[@]} -gt 0 ] && data=$(du -cb "${extra[@]}" | tail -1 | cut -f1)
  local last; last=$(du -sb "${parts[-1]}" | cut -f1)
  for folder in "${extra[@]}"; do
    local size; size=$(du -sb "$folder" | cut -f1)
    if [ $(( last + size )) -le "$budget" ]; then with+=("$folder"); last=$(( last + size )); else alone+=("$folder"); fi
  done
  local calls=() n=${#parts[@]}
  for i in $(seq 0 $((n - 2))); do calls+=("${parts[$i]}"); done
  [ ${#alone[@]} -gt 0 ] && calls+=("${alone[*]}")
  calls+=("${parts[-1]}${with[*]:+ ${with[*]}}")
  echo "Tree ${tree} bytes; parts of $2 MiB: $n parts, data $(( data / 1048576 )) MiB. Device calls, back to back:"
  for i in "${!calls[@]}"; do
    local carry=${calls[$i]} mib cmd="keep" limit="" staged=""
    mib=$(( ( $(du -cb $carry | tail -1 | cut -f1) + tree ) / 1048576 ))
    [ "$i" = $(( ${#calls[@]} - 1 )) ] && { cmd="install"; limit="; timeout_s 600"; }
    for item in $carry; do staged+="${STAGE_IN:+$STAGE_IN/}$item "; done
    echo "  call $((i + 1)): carry [$(echo $code$staged | sed 's/ /, /g')] ($mib MiB with the tree$limit): ${go//\\/}bash tools/gpu/offline_run.sh $cmd"
    [ "$mib" -lt 64 ] || echo "  error: call $((i + 1)) would carry $mib MiB (64 at most)"
  done
  local next=$(( ${#calls[@]} + 1 )) verb
  local verbs=()
  [ -d "$W/data/demo" ] && verbs+=("main" "more")
  [ -d "$W/versus" ] && verbs+=("versus" "CORES=1,2 bash tools/gpu/offline_run.sh versus" \
                                "SPIN=1 bash tools/gpu/offline_run.sh versus" "probe")
  [ -d "$W/data/y11_d4" ] && verbs+=("bound")
  for verb in "${verbs[@]}"; do
    case "$verb" in *" "*) ;; *) verb="bash tools/gpu/offline_run.sh $verb" ;; esac
    echo "  call $next: carry [$(echo $code | sed 's/ /, /g')] (timeout_s 600): ${go//\\/}$verb"; next=$((next + 1))
  done
  return 0
}

# --- device --------------------------------------------------------------------------------------------------
keep() {  # copy what this call carried (parts, data) into /tmp: the machine keeps /tmp while it is warm (30 s)
  mkdir -p "$T/parts" || return 3
  local folder
  for folder in "$W"/p[0-9][0-9]; do [ -d "$folder" ] && cp -n "$folder"/* "$T/parts/"; done
  local repo  # the repositories, from data/ and data2/ (too many for one call: split them by hand)
  for repo in "$W"/data/* "$W"/data2/*; do
    [ -d "$repo" ] && [ ! -d "$T/data/${repo##*/}" ] && mkdir -p "$T/data" && cp -r "$repo" "$T/data/"
  done
  [ -d "$W/versus" ] && [ ! -d "$T/versus" ] && cp -r "$W/versus" "$T/versus"
  ls -l "$T/parts" | tail -n +2 | awk '{print $5, $9}'; [ -d "$T/data" ] && echo "data: $(ls "$T/data")"
  if [ ! -e "$T/facts" ]; then
    touch "$T/facts"; nvidia-smi -L 2>&1 | head -2; "$PY" --version
    "$PY" -c "import pynvml; pynvml.nvmlInit(); print('NVML', pynvml.nvmlSystemGetDriverVersion())" 2>&1 | tail -1
    "$PY" -m pip --version
    echo "tools: $(command -v taskset curl | tr '\n' ' ')"
  fi
  echo "kept in $(since) s"
}

step() {  # step NAME SECONDS COMMAND...: run, log to $T/logs/NAME.log, note rc and time in $OUT/steps.txt
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  timeout "$limit" "$@" > "$T/logs/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - start ))s (t=$(since)s)" | tee -a "$OUT/steps.txt"
  [ $rc = 0 ] || tail -n 4 "$T/logs/$name.log"
  return $rc
}

install() {  # the last part's call: join, verify and install with the project's command (nothing else)
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  local first
  keep > /dev/null && first=$(ls "$T"/parts/*.001-of-* | head -1) || return 3
  "$PY" -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/', timeout=3)" >/dev/null 2>&1 &&
    echo "note: the package index answers here" || echo "no package index reachable (as intended)"
  step install 560 "$PY" -m generator serve --prepare --from-archive "$first"
  local rc=$?
  grep -v "^Creating\|^Unpacking" "$T/logs/install.log" | cut -c1-400 | tee "$T/install.txt"
  echo "install took $(since) s"
  return $rc
}

runtime() {  # the project runtime the install made (its python runs the project's commands)
  RT=$(ls -d "$T"/cache/environments/runtime-*/bin/python 2>/dev/null | head -1)
  [ -x "$RT" ] || { echo "no installed runtime in $T/cache: run install first (within 30 s of it)"; return 3; }
}

scrape_gpu() {  # the watchdog endpoint's gpu_* series once a second while $T/scraping exists
  touch "$T/scraping"
  "$RT" - "$T/scraping" "$OUT/gpu-metrics.txt" <<'PY' &
import sys, time, urllib.request
flag, out = sys.argv[1], sys.argv[2]
import os
with open(out, "a") as sink:
    while os.path.exists(flag):
        try:
            text = urllib.request.urlopen("http://127.0.0.1:8003/metrics", timeout=2).read().decode()
            sink.write(f"# {time.time():.3f}\n" + "".join(l + "\n" for l in text.splitlines() if l.startswith("gpu_")))
            sink.flush()
        except OSError as exc:
            sink.write(f"# {time.time():.3f} scrape failed: {exc}\n")
        time.sleep(1)
PY
}

serve_start() {  # serve_start NAME REPOSITORY...: generator serve in the background, wait until it is ready
  local name=$1; shift
  local args=() r
  for r in "$@"; do args+=(--model-repository "$T/data/$r"); done
  # shellcheck disable=SC2086  # SERVE_ARGS: more words for generator serve (--cuda-pool-mib 0)
  "$RT" -m generator serve "${args[@]}" ${SERVE_ARGS:-} --watchdog-metrics-port 8003 > "$T/logs/$name.log" 2>&1 &
  SERVER=$!
  local i
  for i in $(seq 240); do
    grep -q "^Triton .* ready" "$T/logs/$name.log" && { echo "$name ready after ${i} s (t=$(since)s)" | tee -a "$OUT/steps.txt"; return 0; }
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
  done
  echo "$name did not become ready (t=$(since)s)" | tee -a "$OUT/steps.txt"; tail -n 30 "$T/logs/$name.log"
  return 1
}

serve_stop() { kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; }

measure() {  # the sweeps against the engine alone, most important first; then a Locust cross-check
  # LEVELS: the in-flight counts (a peak past 128 needs more); MODELS: which repositories, in order
  local levels=${LEVELS:-1,8,32,64,128} dur=6 batches=1,8,32
  [ "$DRY" = 1 ] && { levels=${LEVELS:-1,4}; dur=2; batches=1,4; }
  local bench=(--url 127.0.0.1:8001 --protocols grpc --sizes 1280x720 --concurrency $levels --duration $dur
               --paired-rounds 0 --crosscheck-concurrency 0 --results-dir "$OUT/bench")
  local model
  for model in ${MODELS:-y11 demo}; do
    step "bench-$model" 200 "$RT" -m loadtest bench "${bench[@]}" --model $model --label $model
    step "engine-$model" 150 "$RT" -m loadtest engine --repository "$T/data/$model" --model $model \
      --batches $batches --seconds 2 --out "$OUT/engine-$model.json"
  done
  local users=128 workers=8
  [ "$DRY" = 1 ] && { users=4; workers=1; }
  step locust-y11 90 "$RT" -m loadtest run --url 127.0.0.1:8001 --protocol grpc --model y11 --users $users \
    --spawn-rate $users --duration 15s --local-workers $workers --sizes 1280x720 --out "$T/locust-y11" \
    --metrics-url 127.0.0.1:8002
  cp "$T/locust-y11/summary.json" "$OUT/locust-y11.json" 2>/dev/null
}

precisions() {  # FP16 and INT8 on the GPU: agreement with the CPU path, and whether the server refuses them
  local p batch=32
  [ "$DRY" = 1 ] && batch=2
  for p in fp16 int8; do
    step "engine-y11_$p" 120 "$RT" -m loadtest engine --repository "$T/data/y11_$p" --model "y11_$p" \
      --batches $batch --seconds 1 --out "$OUT/engine-y11_$p.json"
  done
  # The detector logs its provider check at load: served (a line) or refused (the load fails, the server exits).
  "$RT" -m generator serve --model-repository "$T/data/y11_int8" --watchdog-metrics-port 0 > "$T/logs/serve-int8.log" 2>&1 &
  SERVER=$!
  local i
  for i in $(seq 150); do
    grep -q "agrees with the CPU provider\|ProviderDisagreement\|^Triton .* ready" "$T/logs/serve-int8.log" && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
  done
  sleep 2; serve_stop
  echo "serve-int8 checked in ${i} s (t=$(since)s)" >> "$OUT/steps.txt"
  grep -h "agrees with the CPU provider" "$T/logs/serve-int8.log" | head -n 2 | cut -c1-900 | tee "$OUT/int8-load.txt"
}

main() {  # serve y11 and demo, measure, scrape the GPU series
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  [ "$DRY" = 1 ] && ip link set lo up 2>/dev/null
  runtime || return 3
  cp "$T/install.txt" "$OUT/" 2>/dev/null
  serve_start serve y11 demo || { bundle run; return 4; }
  scrape_gpu
  measure
  rm -f "$T/scraping"
  serve_stop
  bundle run
}

more() {  # FP16/INT8 agreement and the INT8 load check, then the CPU detector's topology on this host's cores
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  [ "$DRY" = 1 ] && ip link set lo up 2>/dev/null
  runtime || return 3
  precisions
  local cores rounds=2 window=5
  cores=$(nproc)
  [ "$DRY" = 1 ] && { rounds=1; window=2; }
  step tradeoff 480 "$RT" -m tools.tradeoff --cores "$cores" --rounds $rounds --window $window \
    --output "$T/tradeoff.json"
  cp -r "$T/tradeoff.json" "$T/tradeoff" "$OUT/" 2>/dev/null
  grep "^|" "$T/logs/tradeoff.log" | tail -n 5
  bundle more
}

versus() {  # issue 27: the served ensemble against the same ONNX in-process, each core count pinned with taskset
  # CORES: the core counts (default 4,8,all); SPIN=1: the served detector built with --detector-spinning
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  [ "$DRY" = 1 ] && ip link set lo up 2>/dev/null
  runtime || return 3
  keep > /dev/null
  [ -f "$T/versus/model.onnx" ] || { echo "no model carried: prepare with VERSUS_ONNX=PATH"; return 3; }
  local cores=${CORES:-4,8,$(nproc)} rounds=3 extra=(--window "${WINDOW:-4}") label=${LABEL:-versus} word
  [ "$DRY" = 1 ] && { cores=${CORES:-1,2}; rounds=1; extra=(--window 2); }
  [ "${SPIN:-0}" = 1 ] && { extra+=(--build-arg=--detector-spinning); label=versus-spinning; }
  for word in ${BUILD_ARGS:-}; do extra+=("--build-arg=$word"); done  # a variant build, e.g. "--instances 1 1 1"
  # VARIANT_ARGS: a second build served beside the first and paired with it in every round (--variant-arg)
  for word in ${VARIANT_ARGS:-}; do extra+=("--variant-arg=$word"); done
  # Ultralytics' predict where its wheels were carried (VERSUS_WHEELS at prepare); else the column is left out
  local ultra=(--no-ultralytics)
  if ls "$T"/versus/*.whl > /dev/null 2>&1 && "$PY" -m pip install -q --no-index --no-deps --upgrade \
      --target "$T/ultra" "$T"/versus/*.whl > "$T/logs/ultra-install.log" 2>&1; then
    export PYTHONPATH="$T/ultra"; ultra=()
  fi
  label="$label-c${cores//,/-}"
  step "$label" 570 "$RT" -m loadtest versus --onnx "$T/versus/model.onnx" --cores "$cores" --rounds $rounds \
    "${ultra[@]}" "${extra[@]}" --label "$label" --results-dir "$OUT/versus"
  grep "^|\|^- " "$T/logs/$label.log" | tail -n 120
  bundle "$label"
}

probe() {  # issue 35: tools/gpu/spin_probe.py (no Triton, the device's own python3) pinned to each of CORES (default
  # 4,2,1) on the versus model: carried in this call (.device/run/versus, no archive: the cheapest first call) or kept
  mkdir -p "$OUT" && rm -rf "${OUT:?}"/*
  local model=$W/versus/model.onnx count
  [ -f "$model" ] || model=$T/versus/model.onnx
  [ -f "$model" ] || { echo "no model: carry .device/run/versus (prepare with VERSUS_ONNX=PATH)"; return 3; }
  for count in ${CORES:-4 2 1}; do
    [ "$count" -le "$(nproc)" ] || { echo "skipped $count cores: $(nproc) here"; continue; }
    # shellcheck disable=SC2086  # PROBE_ARGS: more words for the probe (--rounds, --window)
    taskset -c "0-$((count - 1))" "$PY" tools/gpu/spin_probe.py --onnx "$model" --out "$OUT/spin-probe-c$count.json" \
      ${PROBE_ARGS:-} 2>&1 | tee -a "$OUT/spin-probe.txt"
    uptime | tee -a "$OUT/spin-probe.txt"
  done
  echo "done in $(since) s"
}

bound() {  # issue 28: which step bounds the GPU pipeline. y11 as built (2/2/2 instances) against itself with four
  # detector (y11_d4) or four preprocess (y11_p4) instances, at LEVELS in flight (default 64,128), y11 again last
  # (the drift), the engine alone beside them, the GPU series scraped (REPOS="y11 y11_d4 y11_p4" at prepare;
  # BOUND="y11 ..." other repositories served beside y11, y11 first: y11_pb, the detector preferring its buckets;
  # y11_host, the GPU preprocess handing its batch over in host memory, --gpu-handoff host; y11_dev, the device
  # hand-off; y11_fused, y11_fused3, one step for preprocess and detector, y11's own default since 2026-12-07;
  # y11_steps, three steps as y11 was before)
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  [ "$DRY" = 1 ] && ip link set lo up 2>/dev/null
  runtime || return 3
  local served=(${BOUND:-y11 y11_d4 y11_p4})
  serve_start serve-bound "${served[@]}" || { bundle bound; return 4; }
  scrape_gpu
  local levels=${LEVELS:-64,128} dur=6 batches=8,32 model label
  [ "$DRY" = 1 ] && { levels=${LEVELS:-1,4}; dur=2; batches=1,4; }
  for label in "${served[@]}" y11-again; do
    model=${label%-again}
    step "bench-$label" 120 "$RT" -m loadtest bench --url 127.0.0.1:8001 --protocols grpc --sizes 1280x720 \
      --concurrency $levels --duration $dur --paired-rounds 0 --crosscheck-concurrency 0 \
      --results-dir "$OUT/bench" --model "$model" --label "$label"
  done
  step engine-y11 150 "$RT" -m loadtest engine --repository "$T/data/y11" --model y11 --batches $batches \
    --seconds 2 --out "$OUT/engine-y11.json"
  rm -f "$T/scraping"
  serve_stop
  bundle bound
}

serve_pool() {  # serve_pool NAME MIB MODEL: generator serve with --cuda-pool-mib MIB ("default": the flag left out)
  SERVE_ARGS=$([ "$2" = default ] || echo "--cuda-pool-mib $2") serve_start "$1" "$3"
}

handoffs_logged() {  # handoffs_logged NAME: the stub's failed GPU hand-offs in that server's log, noted in steps.txt
  grep -c "load GPU buffers" "$T/logs/$1.log" | sed "s/^/$1: failed GPU hand-offs logged: /" | tee -a "$OUT/steps.txt"
}

pool() {  # issue 35: Triton's CUDA memory pool between the GPU steps. y11 served with Triton's own 64 MiB
  # (--cuda-pool-mib 0) and with generator serve's default, in the order 0, default, default, 0 (a drift cancels),
  # at LEVELS in flight, the engine alone last, the GPU series scraped throughout
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  [ "$DRY" = 1 ] && ip link set lo up 2>/dev/null
  runtime || return 3
  local levels=${LEVELS:-64,128,256} dur=6 batches=8,32 label order=(0 default default 0) i=0 mib
  [ "$DRY" = 1 ] && { levels=${LEVELS:-1,4}; dur=2; batches=1,4; }
  scrape_gpu
  for mib in "${order[@]}"; do
    i=$((i + 1)); label="y11-pool-$mib-r$i"
    serve_pool "serve-$label" "$mib" y11 || { rm -f "$T/scraping"; bundle pool; return 4; }
    grep -h "cuda_memory_pool_byte_size\|falling back to pinned" "$T/logs/serve-$label.log" | head -n 3
    step "bench-$label" 150 "$RT" -m loadtest bench --url 127.0.0.1:8001 --protocols grpc --sizes 1280x720 \
      --concurrency "$levels" --duration $dur --paired-rounds 0 --crosscheck-concurrency 0 \
      --results-dir "$OUT/bench" --model y11 --label "$label"
    handoffs_logged "serve-$label"
    serve_stop
  done
  step engine-y11 150 "$RT" -m loadtest engine --repository "$T/data/y11" --model y11 --batches $batches \
    --seconds 2 --out "$OUT/engine-y11.json"
  rm -f "$T/scraping"
  bundle pool
}

handoff() {  # issue 35: does every request get its own image's detections at peak? y11 with Triton's 64 MiB pool
  # (--cuda-pool-mib 0), then with generator serve's default: tools/gpu/handoff_check.py against each
  mkdir -p "$T/logs" "$OUT" && rm -rf "$OUT"/* && touch "$OUT/steps.txt"
  [ "$DRY" = 1 ] && ip link set lo up 2>/dev/null
  runtime || return 3
  local mib label model=${MODEL:-y11} concurrency=${CONCURRENCY:-256} seconds=8
  [ "$DRY" = 1 ] && { concurrency=8; seconds=3; }
  for mib in ${POOLS:-0 default}; do  # POOLS="default": generator serve's pool only
    label="handoff-pool-$mib"
    serve_pool "serve-$label" "$mib" "$model" || { bundle handoff; return 4; }
    step "$label" 120 "$RT" -m tools.gpu.handoff_check --url 127.0.0.1:8001 --model "$model" \
      --concurrency $concurrency --seconds $seconds --out "$OUT/$label.json"
    tail -n 1 "$T/logs/$label.log" | tee -a "$OUT/steps.txt"
    handoffs_logged "serve-$label"
    serve_stop
  done
  bundle handoff
}

bundle() {  # bundle NAME: $OUT keeps the summary and one tar of everything else (8 files at most come back)
  "$RT" tools/gpu/offline_summary.py "$OUT" "$T/logs" > "$T/summary.md" 2>&1
  cat "$T/summary.md"
  mkdir -p "$T/raw" && mv "$OUT"/* "$T/raw/" 2>/dev/null
  tar -czf "$OUT/$1.tar.gz" -C "$T" logs raw && mv "$T/summary.md" "$OUT/$1-summary.md" && rm -rf "$T/raw"
  ls -l "$OUT" | tail -n +2 | awk '{print $5, $9}'
  echo "done in $(since) s"
}

case "${1:-}" in
  prepare) prepare ;;
  keep) keep ;;
  install) install ;;
  main) main ;;
  more) more ;;
  versus) versus ;;
  bound) bound ;;
  probe) probe ;;
  pool) pool ;;
  handoff) handoff ;;
  plan) plan "$(tree_bytes)" "?" ;;
  repos) repos ;;
  *) echo "usage: $0 prepare | repos | plan | keep | install | main | more | versus | bound | probe | pool | handoff"; exit 2 ;;
esac
