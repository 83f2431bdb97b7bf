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
from deploy.policy import compose_violations, dockerfile_violations
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
    assert {"TRITON_RELEASE", "IMAGE_TAG", "TRITON_HTTP_PORT", "TRITON_ADMIN_TOKEN"} <= used


def test_compose_refuses_to_start_without_an_admin_token(rendered_dir: Path, env: dict[str, str]) -> None:
    """The committed .env has no token, so an unset token fails closed instead of serving open admin APIs."""
    assert env["TRITON_ADMIN_TOKEN"] == ""
    text = (rendered_dir / "docker-compose.yml").read_text()
    with pytest.raises(CheckError, match="TRITON_ADMIN_TOKEN"):
        load_compose(text, {**env, "GRAFANA_ADMIN_PASSWORD": "x"})
    with pytest.raises(CheckError, match="GRAFANA_ADMIN_PASSWORD"):
        load_compose(text, {**env, "TRITON_ADMIN_TOKEN": "x"})


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
    assert "FROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3" in triton
    assert "FROM nvcr.io/nvidia/tensorrt:${TRITON_RELEASE}-py3" in builder
    for name in ("builder", "triton", "builder-cpu", "triton-cpu"):
        assert compose["services"][name]["build"]["args"]["TRITON_RELEASE"] == env["TRITON_RELEASE"]
    assert dockerfile_violations(triton, "triton", "nvcr.io/nvidia/tritonserver") == []
    assert dockerfile_violations(builder, "builder", "nvcr.io/nvidia/tensorrt") == []


def test_dockerfile_rules_catch_old_pins_root_and_start_time_installs() -> None:
    old = "ARG TRITON_RELEASE=25.03\nFROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3\nUSER 1000\n"
    assert any("older than 25.07" in p for p in dockerfile_violations(old, "x", "nvcr.io/nvidia/tritonserver"))
    root = "ARG TRITON_RELEASE=26.08\nFROM nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3\nUSER root\n"
    assert any("non-root" in p for p in dockerfile_violations(root, "x", "nvcr.io/nvidia/tritonserver"))
    unpinned = "FROM nvcr.io/nvidia/tritonserver:latest\nUSER 1000\n"
    assert len(dockerfile_violations(unpinned, "x", "nvcr.io/nvidia/tritonserver")) == 2
    late = 'FROM python:3.11-slim\nUSER 1000\nCMD sh -c "pip install numpy && python app.py"\n'
    assert any("container start" in p for p in dockerfile_violations(late, "x", None))


def test_triton_flags_restrict_admin_apis_on_both_protocols(compose: dict[str, Any]) -> None:
    for name in ("triton", "triton-cpu"):
        command = compose["services"][name]["command"]
        for flag in ("--http-restricted-api=", "--grpc-restricted-protocol="):
            (value,) = [a.removeprefix(flag) for a in command if a.startswith(flag)]
            groups, _, header = value.partition(":")
            assert set(groups.split(",")) == set(ADMIN_API_GROUPS)
            assert header == f"admin-key={CHECK_SECRETS['TRITON_ADMIN_TOKEN']}"
        for flag in ("--allow-sagemaker=false", "--allow-vertex-ai=false", "--model-control-mode=none",
                     "--strict-readiness=true", "--exit-on-error=true", "--disable-auto-complete-config"):
            assert flag in command


def test_only_loopback_ports_by_default(compose: dict[str, Any]) -> None:
    published = [(n, p) for n, s in compose["services"].items() for p in s.get("ports", [])]
    assert len(published) >= 9
    assert {p["host_ip"] for _, p in published} == {"127.0.0.1"}


def test_triton_health_shm_and_builder_dependency(compose: dict[str, Any], settings: Settings) -> None:
    for name, builder in (("triton", "builder"), ("triton-cpu", "builder-cpu")):
        svc = compose["services"][name]
        assert svc["depends_on"] == {builder: {"condition": "service_completed_successfully"}}
        test = svc["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python3", "/opt/deploy/healthcheck.py"]
        models = test[test.index("--models") + 1].split(",")
        assert test[test.index("--ensemble") + 1] == settings.model_name
        assert set(models) == set(settings.composing_models)
        assert svc["shm_size"] == "832m"
        assert svc["ulimits"] == {"memlock": -1, "stack": 67108864}
        assert svc["user"] == "1000:1000" and svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
    assert compose["services"]["builder"]["network_mode"] == "none"


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


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (_mutate(("services", "triton", "ports", 1, "host_ip"), "0.0.0.0"), "not loopback"),
        (_mutate(("services", "triton", "ports", 0), "8000:8000"), "long syntax"),
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
        (_mutate(("services", "triton-cpu", "healthcheck", "test", -1), "yolo_detector"), "skips composing"),
        (_mutate(("services", "triton", "depends_on", "builder", "condition"), "service_started"), "depends_on"),
        (_mutate(("services", "triton", "deploy"), _DELETE), "GPU reservation"),
        (_mutate(("services", "builder-cpu", "command"), ["tensorrt"]), "onnxruntime"),
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
        (lambda c: [a.replace("=none", "=explicit") if a.startswith("--model-control") else a for a in c],
         "--model-control-mode=none"),
        (lambda c: [a for a in c if not a.startswith("--http-max-input-size")], "--http-max-input-size"),
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
    assert "--host=grpc://triton:8001" in compose["services"]["locust-master"]["command"]
    assert compose["services"]["locust-worker"]["deploy"]["replicas"] == 2
