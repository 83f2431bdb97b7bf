"""``serve``: run the embedded Triton server in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import signal
import urllib.request
from pathlib import Path
from types import FrameType

from generator.server.embedded import TRITON_VERSION, EmbeddedServer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--ready-timeout", type=float, default=180.0, help="seconds to wait for the models")


def _model_names(server: EmbeddedServer) -> list[str]:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return [m["name"] for m in json.load(response) if m.get("state") == "READY"]


def run(args: argparse.Namespace) -> int:
    server = EmbeddedServer(args.model_repository, args.http_port, args.grpc_port, args.metrics_port)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        server.start()
        server.wait_ready(args.ready_timeout)
        print(f"Triton {TRITON_VERSION} ready: HTTP {server.http_url}, gRPC {server.grpc_url}, "
              f"metrics {server.metrics_url}; models: {', '.join(sorted(_model_names(server)))}", flush=True)
        print("Press Ctrl-C to stop.", flush=True)
        assert server.process is not None
        return server.process.wait()
    except KeyboardInterrupt:
        print("Stopping Triton ...", flush=True)
        code = server.stop()
        print(f"Triton stopped (exit code {code}).", flush=True)
        return 0
    finally:
        server.stop()
