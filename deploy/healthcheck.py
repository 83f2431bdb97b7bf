"""The container health check's old entry point; the probe itself is generator/server/watchdog.py.

deploy/ moves to ``watchdog.py probe --url HOST:PORT --model NAME`` (the same probe, also used by the
watchdog that restarts the server). Until then this keeps the old command line working on top of it:
``--ensemble`` and ``--models`` must answer ready, then one real inference runs through the ensemble.
Standard library only: in the Triton image it runs next to a copy of watchdog.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

try:
    from generator.server import watchdog
except ImportError:  # copied into an image next to watchdog.py, without the project
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import watchdog  # type: ignore[no-redef]

PROBE_JPEG = watchdog.PROBE_JPEG
HealthError = watchdog.ProbeError
build_infer_body = watchdog.build_infer_body


def check_models_ready(address: str, models: Sequence[str], timeout: float) -> None:
    watchdog.check_ready(watchdog.parse_address(address), models, timeout)


def check_inference(address: str, model: str, timeout: float) -> int:
    return int(watchdog.check_inference(watchdog.parse_address(address), model, timeout))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP host:port")
    parser.add_argument("--ensemble", required=True, help="ensemble name, e.g. yolo")
    parser.add_argument("--models", required=True, help="comma-separated composing models that must be ready")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per HTTP call")
    parser.add_argument("--no-infer", action="store_true", help="only check readiness")
    args = parser.parse_args(argv)
    models = [args.ensemble, *(m for m in args.models.split(",") if m)]
    try:
        check_models_ready(args.url, models, args.timeout)
        if not args.no_infer:
            check_inference(args.url, args.ensemble, args.timeout)
    except HealthError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
