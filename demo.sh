#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone: install, build the demo ensemble, start a
# real Triton server on loopback, detect objects in sample images over gRPC and HTTP, stop the server.
set -euo pipefail
cd "$(dirname "$0")"

HTTP_PORT=${HTTP_PORT:-8000}
GRPC_PORT=${GRPC_PORT:-8001}
METRICS_PORT=${METRICS_PORT:-8002}
OUT=${OUT:-runs/demo}

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[build,client]"

python -m generator build                     # demo detector -> model_repository/ (embedded target)

mkdir -p "$OUT"
python - "$OUT/images" <<'PY'
import sys
from pathlib import Path
from generator.synthetic import write_dataset
write_dataset(Path(sys.argv[1]), count=4, seed=2024, sizes=((1280, 720), (640, 480)))
PY

# serve restricts the admin APIs (model config included) to this key; clients.detect reads it for class names.
TRITON_ADMIN_TOKEN=${TRITON_ADMIN_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(32))')}
export TRITON_ADMIN_TOKEN
python -m generator serve --model-repository model_repository \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" > "$OUT/triton.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT

# Ready, or stop at once with the server's own error line when it exits (a port taken, a missing model).
python - "$server" "$HTTP_PORT" "$OUT/triton.log" <<'PY'
import sys
from pathlib import Path
from generator.errors import ServerError
from generator.server.startup import wait_for_pid
try:
    wait_for_pid(int(sys.argv[1]), [f"http://127.0.0.1:{sys.argv[2]}/v2/health/ready"], Path(sys.argv[3]),
                 timeout_s=300, what="generator serve")
except ServerError as exc:
    sys.exit(f"error: {exc}")
PY

echo "== gRPC, one JSON line per image"
python -m clients.detect "$OUT"/images/*.jpg --url "grpc://127.0.0.1:$GRPC_PORT" --json
echo "== HTTP, readable table, annotated copies in $OUT/annotated"
python -m clients.detect "$OUT"/images/*.jpg --url "http://127.0.0.1:$HTTP_PORT" --annotate "$OUT/annotated"
