"""The rollout's split as the proxy reads it: the rendered nginx.conf, run by Debian's nginx in front of a stand-in
upstream that answers with the path it was asked for, sends the published share of the alias's HTTP inference to
the candidate and the rest to the alias; a new split takes effect on the next request, with no reload."""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.canary import Route, read_route
from deploy import commands
from deploy.entrypoints import routing
from deploy.render.files import NGINX_CONF, render_all
from deploy.settings import Settings
from generator.server.ports import free_ports

from .pod import _nginx_binary, make_certificate


class _Echo(http.server.BaseHTTPRequestHandler):

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The rendered proxy with its routing folder under tmp_path; the URL of its HTTPS listener."""
    http_port, https_port, grpcs_port, health_port = free_ports(4)
    settings = Settings(http_port=http_port, proxy_http_port=https_port, proxy_grpc_port=grpcs_port,
                        proxy_health_port=health_port)
    # nginx's workers run as nobody when the tests run as root: the routing folder must be readable by others,
    # as it is in the stack (the rollout writes it as uid 1000, the proxy reads it as uid 1000).
    shared = Path(tempfile.mkdtemp(prefix="routing-"))
    shared.chmod(0o755)
    routing_dir = shared / "routing"
    conf = render_all(settings)[NGINX_CONF].replace(commands.ROUTING_DIR, str(routing_dir))
    (tmp_path / "nginx.conf").write_text(conf)
    make_certificate(tmp_path / "tls")
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", http_port), _Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    nginx = subprocess.Popen([_nginx_binary(), "-p", f"{tmp_path}/", "-c", str(tmp_path / "nginx.conf"), "-e",
                              "stderr"], stderr=(tmp_path / "nginx.log").open("w"))
    try:
        url = f"https://127.0.0.1:{https_port}/v2/models/yolo/infer"
        deadline = time.monotonic() + 20
        while True:
            try:
                _ask(url)
                break
            except OSError:
                assert nginx.poll() is None and time.monotonic() < deadline, (tmp_path / "nginx.log").read_text()
                time.sleep(0.1)
        yield url, routing_dir
    finally:
        nginx.terminate()
        nginx.wait(timeout=20)
        upstream.shutdown()
        shutil.rmtree(shared, ignore_errors=True)


def _ask(url: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), context=context,
                                timeout=10) as answer:
        return str(json.loads(answer.read())["path"])


def _paths(url: str, count: int = 400) -> Counter[str]:
    return Counter(_ask(url) for _ in range(count))


def test_the_proxy_sends_the_published_share_to_the_candidate_without_a_reload(proxy: tuple[str, Path]) -> None:
    url, routing_dir = proxy
    assert _paths(url, 50) == {"/v2/models/yolo/infer": 50}  # no rollout yet: no routing folder at all
    routing.publish(routing_dir, Route("yolo", "yolo_v2", 25))
    assert routing.published_share(routing_dir) == ("yolo_v2", 25)
    assert read_route(routing_dir / routing.ROUTE_FILE) == Route("yolo", "yolo_v2", 25)
    split = _paths(url)
    assert set(split) == {"/v2/models/yolo/infer", "/v2/models/yolo_v2/infer"}
    assert 0.15 < split["/v2/models/yolo_v2/infer"] / 400 < 0.35, split  # request ids are random: about 25 %
    routing.publish(routing_dir, Route("yolo"))
    assert _paths(url, 100) == {"/v2/models/yolo/infer": 100}
    assert [p.name for p in routing_dir.iterdir() if p.name.startswith(routing.SPLIT_PREFIX)] == [
        Path(str((routing_dir / routing.CANARY_LINK).readlink())).parts[0]]  # old splits removed


def test_shares_round_to_whole_buckets_and_any_share_gets_one() -> None:
    assert routing.buckets(Route("yolo", "yolo_v2", 0.2)) == 1
    assert routing.buckets(Route("yolo", "yolo_v2", 12.5)) == 12
    assert routing.buckets(Route("yolo", "yolo_v2", 100)) == routing.BUCKETS
    assert routing.buckets(Route("yolo")) == 0
