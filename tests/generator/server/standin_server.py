"""A stand-in for tritonserver in the supervisor's unit tests: ``python standin_server.py PORT STATE_FILE``.

It answers the two routes the probe uses the way Triton does, with a behaviour read from STATE_FILE on
every request: ``healthy``; ``broken`` (inference fails like a dead Python stub); ``hang`` (inference never
answers in time). It appends ``TERM`` to STATE_FILE.log on SIGTERM and exits 0, unless STATE_FILE says
``ignore-term``. With STANDIN_STUB set (a link named triton_python_backend_stub to a Python), it starts
one fake Python-backend stub for instance m_preprocess_0_0. Each inference request is logged to STATE_FILE.requests after it was answered.
The real tritonserver is exercised in tests/integration/test_faults.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PORT, STATE = int(sys.argv[1]), Path(sys.argv[2])


def append(path: str, line: str) -> None:
    with Path(path).open("a") as file:
        file.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(200, {})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        header = json.loads(body[: int(self.headers["Inference-Header-Content-Length"])])
        state = STATE.read_text().strip()
        if state == "hang":
            time.sleep(30)
        if state == "broken":
            self._answer(500, {"error": "in ensemble 'm', onnx runtime error 6: something failed"})
        elif state == "dead-stub":
            self._answer(500, {"error": "in ensemble 'm', Stub process 'm_preprocess_0_0' is not healthy."})
        else:
            self._answer(200, {"outputs": [{"name": "num_detections", "datatype": "INT32", "shape": [1, 1],
                                            "data": [0]}]})
        append(f"{STATE}.requests", json.dumps({**header["parameters"], "answered": state}))


def on_term(signum: int, frame: object) -> None:
    append(f"{STATE}.log", "TERM")
    if STATE.read_text().strip() != "ignore-term":
        threading.Thread(target=server.shutdown).start()


stub = None
if os.environ.get("STANDIN_STUB"):  # argv like the real stub's: ... <instance name> <kind>
    stub = subprocess.Popen([os.environ["STANDIN_STUB"], "-c", "import time; time.sleep(600)", "model.py",
                             "m_preprocess_0_0", "DEFAULT"])
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True
signal.signal(signal.SIGTERM, on_term)
try:
    server.serve_forever()
finally:
    if stub is not None:
        stub.kill()
