"""The proxy configuration rules, and the package extras each image installs."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.checks import read_pyproject
from deploy.policy import extras_violations, proxy_violations
from deploy.render.files import NGINX_CONF, render_all
from deploy.settings import Settings


@pytest.fixture(scope="module")
def conf() -> str:
    return render_all(Settings())[NGINX_CONF]


def test_rendered_proxy_config_follows_every_rule(conf: str) -> None:
    assert proxy_violations(conf, Settings()) == []


def test_body_limit_follows_the_build_settings() -> None:
    settings = Settings(max_batch=2, max_image_bytes=1_000_000)
    conf = render_all(settings)[NGINX_CONF]
    assert "client_max_body_size 2065568;" in conf  # 2 * (1_000_000 + 16) + 64 KiB
    assert proxy_violations(conf, settings) == []
    assert any("client_max_body_size" in p for p in proxy_violations(conf, Settings()))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("client_max_body_size 33620096;", "client_max_body_size 0;", "client_max_body_size"),
        ("listen 8443 ssl;", "listen 8443;", "TLS on both"),
        ("listen 8444 ssl http2;", "listen 8444 http2;", "TLS on both"),
        ("server 127.0.0.1:8001;", "server 10.0.0.5:8001;", "loopback"),
        ("grpc_pass grpc://triton_grpc;", "proxy_pass http://triton_grpc;", "grpc_pass"),
        ("ssl_protocols TLSv1.2 TLSv1.3;", "ssl_protocols TLSv1 TLSv1.2 TLSv1.3;", "TLSv1.2/TLSv1.3"),
        ("add_header grpc-status 8 always;", "", "RESOURCE_EXHAUSTED"),
    ],
)
def test_each_proxy_rule_catches_its_regression(conf: str, old: str, new: str, expected: str) -> None:
    assert old in conf
    problems = proxy_violations(conf.replace(old, new), Settings())
    assert any(expected in p for p in problems), problems


def test_comments_do_not_count_as_directives(conf: str) -> None:
    broken = conf.replace("client_max_body_size 33620096;", "# client_max_body_size 33620096;")
    assert any("client_max_body_size" in p for p in proxy_violations(broken, Settings()))


def test_the_images_extras_exist_and_the_builder_installs_no_http_client_or_locust() -> None:
    assert extras_violations(read_pyproject()) == []


def test_extras_rule_catches_locust_in_the_builder_image() -> None:
    pyproject = {"project": {
        "dependencies": ["numpy>=1.24", "tritonclient[all]==2.73.0"],
        "optional-dependencies": {"serve": ["opencv-python-headless"], "build": [],
                                  "rollout": ["triton-detection-ensemble[build,client]"], "client": ["locust<2.19"]},
    }}
    problems = extras_violations(pyproject)
    assert any("[loadtest] extra" in p for p in problems)
    assert any("locust" in p and "[rollout]" in p for p in problems)  # followed through the project's own extras
    clean = {"project": {"dependencies": ["tritonclient[grpc]==2.73.0"],
                         "optional-dependencies": {"serve": [], "build": [], "loadtest": [], "gpu": [], "rollout": [],
                                                   "client": ["tritonclient[grpc,http]==2.73.0"]}}}
    assert extras_violations(clean) == []


def test_the_opencv_floor_carries_the_libwebp_fix() -> None:
    def project(opencv: str) -> dict[str, object]:
        return {"project": {"dependencies": [opencv],
                            "optional-dependencies": {"serve": [], "build": [], "loadtest": [], "gpu": [],
                                                      "rollout": []}}}

    assert extras_violations(project("opencv-python-headless>=4.8.1.78,<4.12")) == []
    for old in ("opencv-python-headless>=4.8,<4.12", "opencv-python-headless<4.12", "opencv-python>=4.8.0.76"):
        assert any("CVE-2023-4863" in p for p in extras_violations(project(old))), old


def test_a_canary_share_renders_a_weighted_split_that_nginx_accepts(tmp_path: Path) -> None:
    import subprocess

    from deploy.settings import SettingsError

    from .pod import _nginx_binary, make_certificate

    settings = Settings(canary_model="yolo_v3", canary_percent=12.5)
    conf = render_all(settings)[NGINX_CONF]
    assert proxy_violations(conf, settings) == []
    assert 'split_clients "${request_id}" $ensemble_target' in conf and '12.5% "yolo_v3";' in conf
    assert any("split_clients sending 12.5%" in p for p in proxy_violations(conf.replace("12.5%", "50%"), settings))
    assert any("the rollout's split must send" in p for p in proxy_violations(conf, Settings()))
    proxy = tmp_path / "proxy"
    proxy.mkdir()
    (proxy / "nginx.conf").write_text(conf)
    make_certificate(proxy / "tls")
    tested = subprocess.run([_nginx_binary(), "-t", "-p", f"{tmp_path}/", "-c", str(proxy / "nginx.conf"),
                             "-e", "stderr"], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stderr
    with pytest.raises(SettingsError, match="needs canary_model = yolo_vN"):
        Settings(canary_percent=10, canary_model="other")


# The front door (issue 37, deploy/policy/front_door.py): each rule, broken once, is reported.
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("ECDHE-RSA-AES128-GCM-SHA256:", "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-SHA256:", "AEAD suites only"),
        ('add_header Strict-Transport-Security "max-age=31536000" always;', "", "Strict-Transport-Security"),
        ("return 404 '{\"error\":\"not served here", "proxy_pass http://triton_http; return 404 '{\"error\":\"x",
         "the catch-all must refuse"),
        ("|ModelConfig)$", "|ModelConfig|RepositoryModelLoad)$", "gRPC must route only"),
        ('if ($http_transfer_encoding) {', 'if ($http_x_never) {', "must screen its request"),
        ("limit_except POST {", "limit_except POST GET {", "must screen its request"),
        ('if ($http_content_encoding !~* "^(identity)?$") {', "if ($http_x_never) {", "must screen its request"),
        ('"absent:" "";', '"absent:" "";\n        "~^absent:" "";', "capped at 4096 bytes"),
        ("4096)$", "40960)$", "capped at 4096 bytes"),
        ("client_body_timeout 15s;", "", "client_body_timeout must be set once"),
        ("limit_conn per_client 512;", "", "limit connections per client"),
        ("error_page 502 504 =503 @triton_unavailable;", "", "503 with Retry-After"),
        ("add_header grpc-status 14 always;", "", "UNAVAILABLE"),
    ],
)
def test_each_front_door_rule_catches_its_regression(conf: str, old: str, new: str, expected: str) -> None:
    assert old in conf
    problems = proxy_violations(conf.replace(old, new, 1), Settings())
    assert any(expected in p for p in problems), problems


def test_the_json_cap_matches_exactly_the_lengths_up_to_the_limit() -> None:
    import re

    from deploy.screening import at_most

    for limit in (9, 10, 99, 100, 4096, 65535):
        pattern = re.compile(at_most(limit))
        assert [n for n in range(limit * 3) if bool(pattern.match(str(n))) != (n <= limit)] == []
        assert not pattern.match("0" + str(limit)) and not pattern.match("-1") and not pattern.match("")


def test_the_watchdog_names_the_listeners_that_skip_the_proxy() -> None:
    """Compose: Triton on loopback only, nothing to say. Kubernetes: HTTP on the pod's address (the rollout Job's)."""
    from deploy import commands
    from generator.server.watchdog import exposed_listeners

    def triton(command: list[str]) -> list[str]:
        return command[command.index("tritonserver"):]

    settings = Settings()
    compose = commands.serve_command(settings, gpu=False, token="t")
    k8s = commands.serve_command(settings, gpu=True, token="t", http_address=commands.K8S_HTTP_ADDRESS)
    assert exposed_listeners(triton(compose)) == []
    assert exposed_listeners(triton(k8s)) == [f"HTTP 0.0.0.0:{settings.http_port}"]
    assert exposed_listeners(["tritonserver", "--model-repository=/m"]) == ["HTTP 0.0.0.0:8000", "GRPC 0.0.0.0:8001"]
    assert exposed_listeners(["tritonserver", "--allow-grpc=false", "--http-address=::1"]) == []
