#!/usr/bin/env bash
# Rehearse the offline run's device calls on this machine (tools/gpu/README.md, "The offline run"):
#   DRY=1 PY=/path/to/bare-venv/bin/python bash tools/gpu/offline_run.sh prepare
#   PY=/path/to/bare-venv/bin/python bash tools/gpu/offline_rehearse.sh
# Each call sees in .device/run only what it carries and runs under `unshare -n` (no network; root needed);
# /tmp/tde-dry plays the device's /tmp. PY should be a Python with none of this project's dependencies, so that
# the archive's runtime has to be complete on its own.
set -u
cd "$(dirname "$0")/../.." || exit 2
W=.device/run
STAGE=$(mktemp -d /tmp/tde-stage.XXXXXX)
rm -rf /tmp/tde-dry && mv "$W" "$STAGE/run" || exit 2
trap 'rm -rf "$W"; mv "$STAGE/run" "$W" && rmdir "$STAGE"' EXIT
export TDE_TMP=/tmp/tde-dry OUT=/tmp/tde-dry/out DRY=1 PY=${PY:-python3}
call() {  # call COMMAND CARRIED...: one device call
  local command=$1 item start; shift
  mkdir -p "$W"; for item in "$@"; do mv "$STAGE/run/$item" "$W/$item"; done
  echo "=== $command, carrying [$*]"; start=$(date +%s)
  unshare -n bash tools/gpu/offline_run.sh "$command" 2>&1 | tail -n "${TAIL:-8}"
  echo "=== took $(( $(date +%s) - start )) s"
  for item in "$@"; do mv "$W/$item" "$STAGE/run/$item"; done; rm -rf "$W"
}
parts=$(cd "$STAGE/run" && ls -d p[0-9][0-9])
last=$(echo "$parts" | tail -1)
for part in $(echo "$parts" | head -n -1); do call keep "$part"; done
call keep data
call install "$last"
TAIL=80 call main
TAIL=40 call more
[ -d "$STAGE/run/versus" ] && TAIL=20 call versus versus
