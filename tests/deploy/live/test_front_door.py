"""The front door of the live stack (docs/SECURITY.md): every reproducer of a Triton crash or bypass fixed after
2.51, sent to the proxy's published ports while legitimate detections run on both protocols, is refused with a
JSON 4xx; Triton's container is the same one afterwards and no legitimate request failed. sslscan (Debian's)
sees TLS 1.2 AEAD suites and TLS 1.3 only. Last, tritonserver is killed: until it is back, the proxy answers
503 JSON with Retry-After over HTTP and UNAVAILABLE over gRPC, never nginx's HTML 502.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from clients import ClientError
from tests.deploy import front_door

from .conftest import LiveStack, probe_image

pytestmark = [pytest.mark.live]

RESTART_S = 120.0


def _port(stack: LiveStack, scheme: str) -> int:
    port = urlsplit(stack.endpoints[scheme]).port
    assert port is not None
    return port


class Traffic:
    """Detections in a loop through the proxy, one thread per protocol, counting what failed and why."""

    def __init__(self, stack: LiveStack) -> None:
        self.stack, self.stop = stack, threading.Event()
        self.answered: Counter[str] = Counter()
        self.failed: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(s,), daemon=True) for s in ("https", "grpcs")]

    def _run(self, scheme: str) -> None:
        with self.stack.client(scheme) as client:
            while not self.stop.is_set():
                try:
                    client.detect(probe_image())
                    self.answered[scheme] += 1
                except ClientError as exc:
                    self.failed.append(f"{scheme}: {exc}")

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def test_every_reproducer_is_refused_while_legitimate_traffic_runs(stack: LiveStack) -> None:
    https, grpcs = _port(stack, "https"), _port(stack, "grpcs")
    started = stack.inspect("triton-cpu", "{{.State.StartedAt}} {{.RestartCount}}")
    with Traffic(stack) as traffic:
        time.sleep(1.0)
        answers = {name: send(https, stack.ca_cert) for name, send in front_door.reproducers()}
        grpc = front_door.refused_grpc(grpcs, stack.ca_cert)
        time.sleep(1.0)
    wrong = {name: (a.status, a.body[:120]) for name, a in answers.items() if not 400 <= a.status < 500}
    assert wrong == {}, wrong
    assert {a.headers["content-type"] for a in answers.values()} == {"application/json"}
    conf = stack.exec("proxy", "cat", "/etc/nginx/nginx.conf").stdout
    assert front_door.from_the_proxy(answers, conf) == {}  # nginx's own words: Triton was never asked
    assert all(s.startswith("StatusCode.UNIMPLEMENTED: not served here") for s in grpc.values()), grpc
    assert stack.inspect("triton-cpu", "{{.State.StartedAt}} {{.RestartCount}}") == started, "Triton restarted"
    assert traffic.failed == [], traffic.failed[:5]
    assert min(traffic.answered["https"], traffic.answered["grpcs"]) > 0, traffic.answered
    print(f"\n{len(answers)} HTTP reproducers and {len(grpc)} admin RPCs refused "
          f"({dict(Counter(a.status for a in answers.values()))}); legitimate detections answered "
          f"{dict(traffic.answered)}, failed 0; Triton not restarted ({started})")


_SCAN_LINE = re.compile(r"^(?:Preferred|Accepted)\s+(TLSv1\.[0-3]|SSLv[23])\s+\d+ bits\s+(\S+)", re.MULTILINE)


def test_sslscan_sees_aead_suites_only_on_both_ports(stack: LiveStack) -> None:
    scanner = shutil.which("sslscan")
    if scanner is None:
        pytest.fail("sslscan is not installed: `apt-get install sslscan` (.ci/run installs it)")
    for scheme in ("https", "grpcs"):
        output = subprocess.run([scanner, "--no-colour", f"localhost:{_port(stack, scheme)}"], capture_output=True,
                                text=True, timeout=120, check=True).stdout
        suites = _SCAN_LINE.findall(output)
        enabled = set(re.findall(r"^(SSLv[23]|TLSv1\.[0-3])\s+enabled", output, re.MULTILINE))
        assert enabled == {"TLSv1.2", "TLSv1.3"}, (scheme, enabled)
        weak = [s for s in suites if not any(aead in s[1] for aead in ("GCM", "CHACHA20"))]
        assert suites and weak == [], (scheme, suites)
        print(f"\n{scheme}: sslscan sees {enabled} with {', '.join(name for _, name in suites)}")


def _tritonserver(stack: LiveStack) -> int:
    servers = [pid for pid in stack.host_pids("triton-cpu", "tritonserver")
               if Path(f"/proc/{pid}/comm").read_text().strip() == "tritonserver"]
    assert len(servers) == 1, servers
    return servers[0]


def _grpc_status(port: int, ca: Path) -> str:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"localhost:{port}", ssl=True, root_certificates=str(ca))
    try:
        return "OK" if client.is_server_live(client_timeout=5) else "not live"
    except InferenceServerException as exc:
        return f"{exc.status()}: {exc.message()}"
    finally:
        client.close()


def test_while_triton_restarts_the_proxy_answers_503_json_and_unavailable(stack: LiveStack) -> None:
    https, grpcs = _port(stack, "https"), _port(stack, "grpcs")
    os.kill(_tritonserver(stack), signal.SIGKILL)
    killed, seen = time.monotonic(), Counter[str]()
    unavailable: list[front_door.Answer] = []
    grpc: set[str] = set()
    while time.monotonic() - killed < RESTART_S and not (unavailable and grpc and stack.serving()):
        answer = front_door.request(https, stack.ca_cert, "GET", "/v2/health/live")
        seen[f"{answer.status} {answer.headers.get('content-type')}"] += 1
        if answer.status == 503:
            unavailable.append(answer)
        status = _grpc_status(grpcs, stack.ca_cert)
        if status.startswith("StatusCode.UNAVAILABLE: Triton is unavailable"):
            grpc.add(status)
    healed = stack.wait_serving(RESTART_S, since=killed)
    assert unavailable and grpc, seen
    assert not [k for k in seen if k.startswith("502")], seen  # never nginx's HTML 502
    assert {(a.headers["content-type"], a.headers["retry-after"]) for a in unavailable} == {("application/json", "2")}
    assert all("unavailable" in a.error() for a in unavailable)
    print(f"\ntritonserver killed: answers while down {dict(seen)}, gRPC {grpc}; serving again after {healed:.1f} s")
