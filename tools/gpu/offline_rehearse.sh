#!/usr/bin/env bash
# Rehearse the offline run's device calls on this machine (tools/gpu/README.md, "The offline run"):
#   DRY=1 PY=/path/to/bare-venv/bin/python bash tools/gpu/offline_run.sh prepare     [STUBS=cpu VERSUS_ONNX=...]
#   PY=/path/to/bare-venv/bin/python bash tools/gpu/offline_rehearse.sh
# It runs the calls `offline_run.sh plan` prints, in order, each exactly as printed (its command and what it
# carries): each sees in .device/run only what it carries and runs under `unshare -n` (no network; root needed);
# $TMPDIR/tde-dry (default /tmp) plays the device's /tmp. PY should be a Python with none of this project's dependencies, so that
# the archive's runtime has to be complete on its own.
set -u
cd "$(dirname "$0")/../.." || exit 2
W=.device/run
DRY_ROOT=${TMPDIR:-/tmp}/tde-dry
export TDE_TMP=$DRY_ROOT OUT=$DRY_ROOT/out DRY=1 PY=${PY:-python3}
PLAN=$(bash tools/gpu/offline_run.sh plan | grep '^  call ') || { echo "no plan: run prepare first"; exit 2; }
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/tde-stage.XXXXXX")
rm -rf "$DRY_ROOT" && mv "$W" "$STAGE/run" || exit 2
trap 'rm -rf "$W"; mv "$STAGE/run" "$W" && rmdir "$STAGE"' EXIT
call() {  # call "COMMAND" CARRIED...: one device call (CARRIED relative to .device/run)
  local command=$1 item start; shift
  mkdir -p "$W"; for item in "$@"; do mv "$STAGE/run/$item" "$W/$item"; done
  echo "=== $command, carrying [$*]"; start=$(date +%s)
  unshare -n bash -c "$command" 2>&1 | tail -n "${TAIL:-8}"
  echo "=== took $(( $(date +%s) - start )) s"
  for item in "$@"; do mv "$W/$item" "$STAGE/run/$item"; done; rm -rf "$W"
}
while IFS= read -r line; do
  carried=$(echo "$line" | sed -n 's/^  call [0-9]*: carry \[\([^]]*\)\].*/\1/p' | tr -d ',' | sed "s#$W/##g")
  command=${line#*): }
  case "$command" in *keep) TAIL=8 ;; *install) TAIL=20 ;; *) TAIL=40 ;; esac
  # shellcheck disable=SC2086  # the carried folders are words
  TAIL=$TAIL call "$command" $carried
done <<< "$PLAN"
