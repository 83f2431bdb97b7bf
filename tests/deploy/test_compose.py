"""docker-compose.yml: Compose Specification schema plus the hardening and pinning rules."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deploy.checks import CHECK_SECRETS
from deploy.composefile import interpolate, load_compose, parse_env, referenced_variables
from deploy.errors import CheckError
from deploy.policy import (
    DOCKERFILES,
    compose_text_violations,
    compose_violations,
    dockerfile_violations,
    env_violations,
)
from deploy.settings import ADMIN_API_GROUPS, Settings, release_tuple
from deploy.validate import compose_schema_errors


def test_compose_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    assert compose_schema_errors(compose) == []


def test_schema_catches_a_misspelt_key_and_a_bad_type(compose: dict[str, Any]) -> None:
    compose["services"]["triton"]["shm_sizee"] = "1g"
    compose["services"]["grafana"]["read_only"] = ["yes"]
    problems = compose_schema_errors(compose)
    assert any("shm_sizee" in p for p in problems)
    assert any("grafana" in p for p in problems)


def test_default_compose_follows_every_rule(compose: dict[str, Any], env: dict[str, str],
                                            settings: Settings) -> None:
    assert compose_violations(compose, env, settings) == []


def test_every_variable_is_defined_in_env(rendered_dir: Path, env: dict[str, str]) -> None:
    used = referenced_variables((rendered_dir / "docker-compose.yml").read_text())
    assert used - set(env) == set()
    assert {"TRITON_RELEASE", "IMAGE_TAG", "PROXY_GRPC_PORT", "TRITON_ADMIN_TOKEN", "TRITON_BASE_DIGEST"} <= used


def test_compose_refuses_to_start_without_an_admin_token(rendered_dir: Path, env: dict[str, str]) -> None:
    """The committed .env has no token, so an unset token fails closed instead of serving open admin APIs."""
    assert env["TRITON_ADMIN_TOKEN"] == ""
    text = (rendered_dir / "docker-compose.yml").read_text()
    others = {**env, **CHECK_SECRETS}
    with pytest.raises(CheckError, match="TRITON_ADMIN_TOKEN"):
        load_compose(text, {**others, "TRITON_ADMIN_TOKEN": ""})
    with pytest.raises(CheckError, match="GRAFANA_ADMIN_PASSWORD"):
        load_compose(text, {**others, "GRAFANA_ADMIN_PASSWORD": ""})


def test_interpolation_forms() -> None:
    env = {"A": "1", "E": ""}
    assert interpolate("${A} ${B:-d} ${E:-d} ${E-d} $${A}", env) == "1 d d  ${A}"
    with pytest.raises(CheckError, match="B"):
        interpolate("${B:?needed}", env)
    with pytest.raises(CheckError):
        interpolate("$A", env)  # bare form is not used by the rendered files


def test_env_parser_rejects_garbage() -> None:
    assert parse_env("# c\n\nA=1\nB='two'\n") == {"A": "1", "B": "two"}
    with pytest.raises(CheckError):
        parse_env("not a pair\n")


def test_triton_is_pinned_at_or_above_25_07_and_builder_uses_the_same_release(
    rendered_dir: Path, env: dict[str, str], compose: dict[str, Any]
) -> None:
    assert release_tuple(env["TRITON_RELEASE"]) >= (25, 7)
    triton = (rendered_dir / "docker/triton.Dockerfile").read_text()
    builder = (rendered_dir / "docker/builder.Dockerfile").read_text()
    assert f"ARG TRITON_RELEASE={env['TRITON_RELEASE']}\n" in triton
    assert f"ARG TRITON_RELEASE={env['TRITON_RELEASE']}\n" in builder
    assert "FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3@${TRITON_BASE_DIGEST}" in triton
    assert "FROM nvcr.io/nvidia/tensorrt:${TRITON_RELEASE}-py3@${TENSORRT_BASE_DIGEST}" in builder
    for name in ("builder", "triton"):
        assert compose["services"][name]["build"]["args"]["TRITON_RELEASE"] == env["TRITON_RELEASE"]
    for name in ("builder-cpu", "triton-cpu"):  # the CPU stack: Triton 2.51 from the pinned wheel on Debian
        assert compose["services"][name]["build"]["args"]["DEBIAN_IMAGE"] == env["DEBIAN_IMAGE"]
    for image in DOCKERFILES:
        text = (rendered_dir / f"docker/{image}.Dockerfile").read_text()
        assert dockerfile_violations(text, image, Settings()) == [], image
        assert "# syntax" not in text  # BuildKit would fetch that frontend from a registry first
    # The CPU image prepares the CPU stub environment unless its build asks for another (STUB_ENV=openvino).
    cpu = (rendered_dir / "docker/triton-cpu.Dockerfile").read_text()
    for broken in (cpu.replace("ARG STUB_ENV=cpu", "ARG STUB_ENV=gpu"), cpu.replace("--stub-env", "--stub")):
        assert any("must prepare the pinned server" in p for p in dockerfile_violations(broken, "triton-cpu", Settings()))


_NGC = "ARG TRITON_RELEASE={release}\nARG TRITON_BASE_DIGEST={digest}\nFROM {base}\n" \
       'RUN python3 -m pip install "/opt/project[{extra}]"\nCOPY generator/server/watchdog.py /opt/deploy/watchdog.py\n' \
       "USER {user}\n"
_PINNED_FROM = "nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3@${TRITON_BASE_DIGEST}"


def _triton_dockerfile(**changes: str) -> str:
    values = {"release": "26.08", "digest": "", "base": _PINNED_FROM, "extra": "serve", "user": "1000"}
    return _NGC.format(**{**values, **changes})


def test_dockerfile_rules_catch_old_pins_unpinned_bases_wrong_extras_and_root() -> None:
    s = Settings()
    assert dockerfile_violations(_triton_dockerfile(), "triton", s) == []
    assert dockerfile_violations(_triton_dockerfile(digest="sha256:" + "a" * 64), "triton", s) == []
    cases = {
        "older than 25.07": _triton_dockerfile(release="25.03"),
        "tag and digest": _triton_dockerfile(base="nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3"),
        "ARG TRITON_BASE_DIGEST": _triton_dockerfile(digest="latest"),
        "[serve] extra": _triton_dockerfile(extra="serve,loadtest"),
        "non-root": _triton_dockerfile(user="root"),
    }
    for expected, text in cases.items():
        assert any(expected in p for p in dockerfile_violations(text, "triton", s)), expected
    late = 'ARG PYTHON_IMAGE=python:3.11\nFROM ${PYTHON_IMAGE}\nUSER 1000\nCMD sh -c "pip install numpy"\n'
    problems = dockerfile_violations(late, "loadtest", s)
    assert any("container start" in p for p in problems) and any("sha256" in p for p in problems)
    fetching = "# syntax=docker/dockerfile:1\n" + _triton_dockerfile()
    assert any("syntax" in p for p in dockerfile_violations(fetching, "triton", s))


def test_the_ngc_digests_are_required_at_deploy_time(rendered_dir: Path, env: dict[str, str]) -> None:
    """The committed .env cannot know NGC digests: compose refuses to build until they are set."""
    text = (rendered_dir / "docker-compose.yml").read_text()
    assert compose_text_violations(text) == []
    assert env["TRITON_BASE_DIGEST"] == env["TENSORRT_BASE_DIGEST"] == ""
    with pytest.raises(CheckError, match="TRITON_BASE_DIGEST"):
        load_compose(text, {**env, **{k: v for k, v in CHECK_SECRETS.items() if k != "TRITON_BASE_DIGEST"}})
    with pytest.raises(CheckError, match="TENSORRT_BASE_DIGEST"):
        load_compose(text, {**env, **{k: v for k, v in CHECK_SECRETS.items() if k != "TENSORRT_BASE_DIGEST"}})
    loose = text.replace("${TRITON_BASE_DIGEST:?", "${TRITON_BASE_DIGEST:-")
    assert any("TRITON_BASE_DIGEST" in p for p in compose_text_violations(loose))
    assert any("sha256" in p for p in env_violations({**env, "TENSORRT_BASE_DIGEST": "latest"}))
    assert any("NGINX_IMAGE" in p for p in env_violations({**env, "NGINX_IMAGE": "nginx:1.30.5-alpine"}))


def test_triton_flags_restrict_admin_apis_on_both_protocols(compose: dict[str, Any]) -> None:
    for name in ("triton", "triton-cpu"):
        command = compose["services"][name]["command"]
        for flag in ("--http-restricted-api=", "--grpc-restricted-protocol="):
            (value,) = [a.removeprefix(flag) for a in command if a.startswith(flag)]
            groups, _, header = value.partition(":")
            assert set(groups.split(",")) == set(ADMIN_API_GROUPS)
            assert header == f"admin-key={CHECK_SECRETS['TRITON_ADMIN_TOKEN']}"
        for flag in ("--allow-sagemaker=false", "--allow-vertex-ai=false", "--model-control-mode=explicit",
                     "--load-model=yolo",
                     "--strict-readiness=true", "--exit-on-error=true", "--disable-auto-complete-config",
                     "--http-address=127.0.0.1", "--grpc-address=127.0.0.1"):
            assert flag in command


def test_only_the_proxy_is_reachable_and_only_on_loopback_by_default(compose: dict[str, Any],
                                                                     settings: Settings) -> None:
    services = compose["services"]
    # The pod owns the namespace both join: either can restart alone and join it again.
    for name in ("triton", "triton-cpu", "proxy"):
        assert services[name]["network_mode"] == "service:pod" and "ports" not in services[name]
    pod = services["pod"]
    assert pod["entrypoint"][0] == "sleep" and pod["init"] is True
    assert sorted(p["target"] for p in pod["ports"]) == [settings.proxy_http_port, settings.proxy_grpc_port]
    published = [p for s in services.values() for p in s.get("ports", [])]
    assert {p["host_ip"] for p in published} == {"127.0.0.1"}
    assert pod["networks"]["default"]["aliases"] == ["triton"]  # Prometheus scrapes triton:8002 there
    # An operator may publish the proxy's ports (and only those) on the network.
    public = Settings(proxy_bind_address="0.0.0.0")
    compose["services"]["pod"]["ports"][0]["host_ip"] = "0.0.0.0"
    compose["services"]["pod"]["ports"][1]["host_ip"] = "0.0.0.0"
    assert not [p for p in compose_violations(compose, {}, public) if "published on" in p]
    assert [p for p in compose_violations(compose, {}, settings) if "published on" in p]


def test_the_proxy_starts_after_either_stacks_build(compose: dict[str, Any]) -> None:
    """Its nginx.conf includes the in-flight limit the build writes into the volume (deploy/proxy_admission.py)."""
    needs = compose["services"]["proxy"]["depends_on"]
    for builder in ("builder", "builder-cpu"):
        assert needs[builder] == {"condition": "service_completed_successfully", "required": False}
    assert needs["pod"] == {"condition": "service_started"}


def test_triton_entry_point_probe_grace_shm_and_builder_dependency(compose: dict[str, Any],
                                                                   settings: Settings) -> None:
    for name, builder in (("triton", "builder"), ("triton-cpu", "builder-cpu")):
        svc = compose["services"][name]
        assert svc["depends_on"][builder] == {"condition": "service_completed_successfully"}
        assert svc["command"][:3] == ["python3", "-m", "deploy.entrypoints.serve_models"]
        assert svc["restart"] == "unless-stopped" and svc["init"] is True
        assert svc["stop_grace_period"] == "45s"  # > watchdog grace 40 s > --exit-timeout-secs=30
        assert "--grace-s=40" in svc["command"] and "--exit-timeout-secs=30" in svc["command"]
        assert svc["healthcheck"]["test"] == ["CMD", "python3", "/opt/deploy/watchdog.py", "probe", "--url",
                                              "127.0.0.1:8000", "--model", settings.model_name, "--timeout-s", "5"]
        assert svc["environment"] == {"OPENCV_IO_MAX_IMAGE_PIXELS": str(settings.max_image_pixels)}
        assert svc["user"] == "1000:1000" and svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
        # A lost stub restarts tritonserver in place; anything else exits for the restart policy.
        assert "--restart-on=stub_exited,dead_stub" in svc["command"]
    # 4 Python instances (2 preprocess, 2 NMS) on the GPU; on the CPU stack the generator's default 2, 2 and 2,
    # the embedded detector's two being Python models too.
    assert compose["services"]["triton"]["shm_size"] == "448m"
    assert compose["services"]["triton-cpu"]["shm_size"] == "640m"
    assert "--instances" not in compose["services"]["builder-cpu"]["command"]
    # NVIDIA's host limits on the GPU stack only: a daemon that cannot raise memlock still runs the CPU stack.
    for name in ("builder", "triton"):
        assert compose["services"][name]["ulimits"] == {"memlock": -1, "stack": 67108864}
    for name in ("builder-cpu", "triton-cpu", "proxy", "pod"):
        assert "ulimits" not in compose["services"][name]
    for name in ("builder", "builder-cpu"):
        assert compose["services"][name]["network_mode"] == "none"
    assert "--http-max-input-size=33620096" in compose["services"]["triton"]["command"]
    assert not [a for a in compose["services"]["triton-cpu"]["command"] if a.startswith("--http-max-input-size")]
    assert compose["services"]["proxy"]["stop_signal"] == "SIGQUIT"
    assert compose["services"]["proxy"]["healthcheck"]["test"][1:] == [
        "wget", "-q", "-O", "/dev/null", "-T", "5", "http://127.0.0.1:8445/healthz"]


def test_gpu_host_ulimits_are_settings() -> None:
    """memlock and stack are settings of the GPU stack: 0 leaves one out, both 0 leave none."""
    from deploy.render.files import render_all

    def limits(**overrides: Any) -> dict[str, Any]:
        text = render_all(Settings(**overrides))["docker-compose.yml"]
        env = {**parse_env(render_all(Settings())[".env"]), **CHECK_SECRETS}
        return {name: load_compose(text, env)["services"][name].get("ulimits") for name in ("builder", "triton")}

    assert limits(gpu_ulimit_memlock=0) == {"builder": {"stack": 67108864}, "triton": {"stack": 67108864}}
    assert limits(gpu_ulimit_memlock=0, gpu_ulimit_stack=0) == {"builder": None, "triton": None}


def _mutate(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return apply


_DELETE = object()


def _set_flag(service: str, flag: str, value: str) -> Callable[[dict[str, Any]], None]:
    """Change the value after ``flag`` in a service's command."""
    def apply(doc: dict[str, Any]) -> None:
        command = doc["services"][service]["command"]
        command[command.index(flag) + 1] = value
    return apply


def _add_flag(service: str, flag: str, value: str) -> Callable[[dict[str, Any]], None]:
    """Append ``flag value`` to a service's command (a build option the settings leave to the generator)."""
    def apply(doc: dict[str, Any]) -> None:
        doc["services"][service]["command"] += [flag, value]
    return apply


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (_mutate(("services", "grafana", "ports", 0, "host_ip"), "0.0.0.0"), "not loopback"),
        (_mutate(("services", "pod", "ports", 0, "host_ip"), "0.0.0.0"), "settings say"),
        (_mutate(("services", "proxy", "ports"), [{"target": 8443, "host_ip": "127.0.0.1"}]), "pod's network"),
        (_mutate(("services", "proxy", "network_mode"), "service:triton"), "pod's network"),
        (_mutate(("services", "proxy", "healthcheck"), _DELETE), "broken path"),
        (_mutate(("services", "pod", "entrypoint"), ["nginx"]), "only sleep"),
        (_mutate(("services", "pod", "networks"), _DELETE), "alias triton"),
        (_mutate(("services", "builder-cpu", "network_mode"), "bridge"), "network_mode must be none"),
        (_mutate(("services", "triton-cpu", "ulimits"), {"memlock": -1}), "ulimits"),
        (_mutate(("services", "prometheus", "ports", 0), "9090:9090"), "long syntax"),
        (_mutate(("services", "triton", "ports"), [{"target": 8000, "host_ip": "127.0.0.1"}]), "network namespace"),
        (_mutate(("services", "triton-cpu", "network_mode"), _DELETE), "network namespace"),
        (_mutate(("services", "triton", "stop_grace_period"), "10s"), "stop_grace_period"),
        (_mutate(("services", "triton", "restart"), "no"), "restart"),
        (_mutate(("services", "triton", "environment"), {}), "OPENCV_IO_MAX_IMAGE_PIXELS"),
        (_mutate(("services", "triton", "healthcheck", "test"), ["CMD", "curl", "-f", "localhost:8000"]), "probe"),
        (_mutate(("services", "proxy", "image"), "nginx:1.30.5-alpine"), "pinned"),
        (_mutate(("services", "pod", "image"), "nginx:1.30.5-alpine"), "pinned"),
        (_mutate(("services", "grafana", "image"), "grafana/grafana:latest"), "pinned"),
        (_mutate(("services", "proxy", "stop_signal"), "SIGTERM"), "SIGQUIT"),
        (_mutate(("services", "proxy", "volumes", 1, "read_only"), False), "/etc/nginx/tls"),
        (_mutate(("services", "triton", "user"), "0:0"), "non-root"),
        (_mutate(("services", "prometheus", "user"), _DELETE), "non-root"),
        (_mutate(("services", "triton", "read_only"), False), "read_only"),
        (_mutate(("services", "grafana", "cap_drop"), ["NET_RAW"]), "cap_drop"),
        (_mutate(("services", "locust-worker", "cap_add"), ["SYS_ADMIN"]), "cap_add"),
        (_mutate(("services", "builder", "security_opt"), []), "no-new-privileges"),
        (_mutate(("services", "triton", "shm_size"), "64m"), "shm_size"),
        (_mutate(("services", "triton", "ulimits", "memlock"), 65536), "ulimits"),
        (_mutate(("services", "triton", "volumes", 0, "read_only"), False), "read-only"),
        (_mutate(("services", "triton", "healthcheck", "disable"), True), "healthcheck"),
        (_mutate(("services", "triton-cpu", "healthcheck", "test", 7), "yolo_detector"), "--model must be yolo"),
        (_mutate(("services", "triton", "depends_on", "builder", "condition"), "service_started"), "depends_on"),
        (_mutate(("services", "triton", "deploy"), _DELETE), "GPU reservation"),
        (_set_flag("builder-cpu", "--target", "onnxruntime"), "--target is 'onnxruntime', the settings say 'embedded'"),
        (_set_flag("builder", "--max-image-pixels", "999"), "--max-image-pixels is 999"),
        (_add_flag("builder", "--max-queue-ms", "5000"), "--max-queue-ms is 5000"),
        (_set_flag("builder", "--onnx", "/tmp/other.onnx"), "--onnx must be /opt/detector/model.onnx"),
        (_mutate(("services", "builder", "volumes", 0, "read_only"), True), "writable"),
        (_mutate(("services", "grafana", "profiles"), ["gpu"]), "profiles"),
    ],
)
def test_each_rule_catches_its_regression(compose: dict[str, Any], env: dict[str, str], settings: Settings,
                                          mutation: Callable[[dict[str, Any]], None], expected: str) -> None:
    broken = copy.deepcopy(compose)
    mutation(broken)
    problems = compose_violations(broken, env, settings)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        (lambda c: [a for a in c if not a.startswith("--grpc-restricted-protocol")], "gRPC admin APIs"),
        (lambda c: [a.replace("trace,logging:", "trace:") for a in c], "restricts"),
        (lambda c: [a.replace("admin-key=check-token", "admin-key=") for a in c], ":admin-key=<token>"),
        (lambda c: [a for a in c if a != "--allow-vertex-ai=false"], "--allow-vertex-ai=false"),
        (lambda c: [a.replace("=explicit", "=none") if a.startswith("--model-control") else a for a in c],
         "--model-control-mode=explicit"),
        (lambda c: [a for a in c if not a.startswith("--load-model")], "--load-model"),
        (lambda c: [a for a in c if not a.startswith("--http-max-input-size")], "--http-max-input-size"),
        (lambda c: [a for a in c if not a.startswith("--grpc-address")], "--grpc-address=127.0.0.1"),
        (lambda c: [a.replace("=127.0.0.1", "=0.0.0.0") if a.startswith("--http-address") else a for a in c],
         "--http-address must be 127.0.0.1"),
        (lambda c: [a.replace("=30", "=300") if a.startswith("--exit-timeout") else a for a in c], "--exit-timeout-secs"),
        (lambda c: [a.replace("current", "yolo") if a.startswith("--model-repository") else a for a in c],
         "--model-repository"),
        (lambda c: [a for a in c if not a.startswith("--grace-s")], "--grace-s"),
        (lambda c: c[c.index("--") + 1:], "deploy.entrypoints.serve_models"),
    ],
)
def test_flag_rules_catch_their_regression(compose: dict[str, Any], env: dict[str, str], settings: Settings,
                                           transform: Callable[[list[str]], list[str]], expected: str) -> None:
    compose["services"]["triton"]["command"] = transform(compose["services"]["triton"]["command"])
    problems = compose_violations(compose, env, settings)
    assert any(expected in p for p in problems), problems


def test_committed_env_must_not_carry_secrets_or_a_public_bind(compose: dict[str, Any], env: dict[str, str],
                                                              settings: Settings) -> None:
    leaky = {**env, "TRITON_ADMIN_TOKEN": "hunter2", "BIND_ADDRESS": "0.0.0.0"}
    problems = compose_violations(compose, leaky, settings)
    assert any("TRITON_ADMIN_TOKEN must stay empty" in p for p in problems)
    assert any("BIND_ADDRESS" in p for p in problems)
    old = compose_violations(compose, {**env, "TRITON_RELEASE": "24.08"}, settings)
    assert any("older than 25.07" in p for p in old)


def test_locust_runs_a_user_class_the_project_locustfile_defines(compose: dict[str, Any],
                                                                rendered_dir: Path) -> None:
    import ast

    locustfile = Path(__file__).resolve().parents[2] / "loadtest" / "locustfile.py"
    classes = {n.name for n in ast.walk(ast.parse(locustfile.read_text())) if isinstance(n, ast.ClassDef)}
    dockerfile = (rendered_dir / "docker/loadtest.Dockerfile").read_text()
    assert 'ENTRYPOINT ["locust", "-f", "loadtest/locustfile.py"]' in dockerfile
    for name in ("locust-master", "locust-worker"):
        command = compose["services"][name]["command"]
        assert command[0] in classes, f"{command[0]} not in {sorted(classes)}"
    # Through the TLS proxy like every client, verifying its certificate.
    assert "--host=grpcs://triton:8444" in compose["services"]["locust-master"]["command"]
    worker = compose["services"]["locust-worker"]
    assert worker["environment"]["LOADTEST_CA_CERT"] == "/etc/locust/ca.crt"
    assert [v["source"] for v in worker["volumes"]] == ["./tls/tls.crt"]  # the certificate, never the key
    assert compose["services"]["locust-worker"]["deploy"]["replicas"] == 2


def test_the_gpu_preprocess_installs_its_extra_sizes_the_cuda_pool_and_reaches_the_gpu_build(
        tmp_path: Path) -> None:
    """preprocess_device=gpu: the `gpu` extra where Triton runs and where `generator check` verifies it, Triton's
    CUDA memory pool for the images between the steps, and --preprocess-device gpu for the GPU stack only."""
    from deploy.checks import run_checks
    from deploy.render.files import render_all, write_rendered

    settings = Settings(preprocess_device="gpu", nms_in_graph=True)
    rendered = render_all(settings)
    assert '"/opt/project[serve,gpu]"' in rendered["docker/triton.Dockerfile"]
    assert '"/opt/project[rollout,gpu]"' in rendered["docker/builder.Dockerfile"]
    assert '"/opt/project[loadtest]"' in rendered["docker/loadtest.Dockerfile"]
    write_rendered(rendered, tmp_path)
    assert run_checks(tmp_path, settings) == []
    services = load_compose((tmp_path / "docker-compose.yml").read_text(),
                            {**parse_env((tmp_path / ".env").read_text()), **CHECK_SECRETS})["services"]
    gpu, cpu = services["triton"]["command"], services["triton-cpu"]["command"]
    assert "--cuda-memory-pool-byte-size=0:2147483648" in gpu
    assert not [a for a in cpu if a.startswith("--cuda-memory-pool")]
    for name, device in (("builder", "gpu"), ("builder-cpu", "cpu")):
        command = services[name]["command"]
        assert command[command.index("--preprocess-device") + 1] == device and "--nms-in-graph" in command
    # The default render, checked against these settings, misses all of it.
    write_rendered(render_all(Settings()), tmp_path)
    problems = run_checks(tmp_path, settings, check_drift=False)
    for expected in ("[serve,gpu]", "--cuda-memory-pool-byte-size", "--preprocess-device", "--nms-in-graph"):
        assert any(expected in p for p in problems), expected


@pytest.mark.parametrize("profiles", [("gpu", "gpu-rollout", "monitoring", "loadtest"),
                                      ("cpu", "monitoring", "loadtest", "cpu-rollout")])
def test_every_service_a_profile_set_enables_finds_what_it_depends_on(compose: dict[str, Any],
                                                                      profiles: tuple[str, ...]) -> None:
    """Compose refuses a project (down included) where an enabled service depends on a disabled one: each
    stack's rollout has its own profile for that reason (a dependency marked ``required: false``, the proxy's on
    each stack's builder, is waited for only where it exists). The CPU set is what `down --local` enables."""
    from deploy.local.stack import PROFILES

    assert set(profiles) == set(PROFILES) or "gpu" in profiles
    enabled = {name for name, svc in compose["services"].items() if set(svc.get("profiles") or []) & set(profiles)}
    for name in enabled:
        needs = {need for need, how in (compose["services"][name].get("depends_on") or {}).items()
                 if how.get("required", True)}
        assert needs <= enabled, f"{name} depends on {sorted(needs - enabled)}, not enabled by {profiles}"
