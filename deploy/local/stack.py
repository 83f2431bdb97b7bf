"""``python -m deploy up|down --local``: the CPU stack with monitoring on this machine, healthy, or nothing.

``up`` checks the engine floor, picks the base images (pinned where here or pullable, local stand-ins
otherwise: bases.py), makes a throwaway CA, certificate and secrets when none are given (credentials.py), builds
the CPU stack's images (layer-cached), starts ``pod``, ``proxy``, ``builder-cpu``, ``triton-cpu`` and
``prometheus`` from the committed ``deploy/docker-compose.yml`` and waits until each is healthy (the builder:
exited 0). Its last line on stdout is one JSON object: ``https``, ``grpcs``, ``ca_cert``, ``prometheus``,
``admin_token_file``. ``down`` removes the project's containers, networks and volumes, and the credentials.
``--platform linux/arm64`` builds and runs the same stack for another architecture (platforms.py): its bases and
images carry the architecture in their tags, so both coexist on one daemon, and compose builds and starts them
for it (DOCKER_DEFAULT_PLATFORM); on a daemon of another architecture that runs under emulation.
A project installed from a site archive (``deploy install``, site_install.py) runs from the archive's rendered
files and images instead: ``up`` then builds nothing and pulls nothing, and ``down`` keeps the installed site.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from deploy.errors import LocalStackError
from deploy.local import docker
from deploy.local.bases import resolve_bases
from deploy.local.credentials import Credentials, ensure_credentials
from deploy.local.docker_versions import check_engine
from deploy.local.platforms import Platform, daemon_platform, parse
from deploy.settings import Settings

logger = logging.getLogger(__name__)

DEPLOY_DIR = Path(__file__).resolve().parents[1]
COMPOSE_FILE = DEPLOY_DIR / "docker-compose.yml"
STATE_ROOT = DEPLOY_DIR / ".local"  # git-ignored and docker-ignored
# Sites installed from an archive (site_install.py), by project: their rendered files and images. `down` keeps them.
SITES_ROOT = STATE_ROOT / ".sites"
SITE_ENV = "site.env"
ENV_FILE = "compose.env"
DEFAULT_PROJECT = "yolo-triton-local"
UP_SERVICES = ("pod", "proxy", "builder-cpu", "triton-cpu", "prometheus")
BUILT_SERVICES = ("builder-cpu", "triton-cpu")
# What `down` removes: every service the local stack (and a load test run against it) may have started.
PROFILES = ("cpu", "monitoring", "loadtest", "cpu-rollout")
SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
WAIT_TIMEOUT_S = 900
BUILD_TIMEOUT_S = 3600.0
# Compose interpolates the whole file, GPU services included: their NGC digests must be set even though the local
# stack never builds or pulls those images. This stand-in only lets the file interpolate (deploy/checks.py
# uses the same for the static checks); a GPU build with it fails at the registry.
UNUSED_NGC_DIGEST = "sha256:" + "0" * 64


@dataclass(frozen=True)
class LocalStack:
    """How ``up``/``down --local`` run: the compose project, the ports, whose TLS files, how images build."""

    project: str = DEFAULT_PROJECT
    publish: str = "settings"  # "auto": the engine picks free host ports (read back with `docker compose port`)
    tls_dir: Path | None = None
    pull: bool = True
    build_network: str = "host"
    build_ca_bundle: Path | None = None
    platform: str | None = None  # linux/arm64: another architecture than the daemon's (None: the daemon's own)

    def __post_init__(self) -> None:
        if self.platform:
            parse(self.platform)  # an unknown one is refused before anything runs

    def target(self) -> Platform:
        """The architecture the stack's images are built and run for."""
        return parse(self.platform) if self.platform else daemon_platform()

    @property
    def state(self) -> Path:
        return STATE_ROOT / self.project

    def ca_bundle(self) -> Path:
        """A CA bundle for pip in the image builds (a TLS-intercepting proxy's CA); the empty default otherwise."""
        if self.build_ca_bundle is not None:
            return self.build_ca_bundle
        from_env = os.environ.get("BUILD_CA_BUNDLE")
        if from_env:
            return Path(from_env)
        return SYSTEM_CA_BUNDLE if SYSTEM_CA_BUNDLE.is_file() else DEPLOY_DIR / "docker" / "build-ca.pem"


def compose_args(project: str, *args: str) -> list[str]:
    """``docker compose`` for ``project`` on the committed file (an installed site's own rendered files where
    ``deploy install`` put them): its .env, then the run's own compose.env."""
    own = STATE_ROOT / project / ENV_FILE
    directory = SITES_ROOT / project if installed_site(project) is not None else DEPLOY_DIR
    env_files = ["--env-file", str(directory / ".env"), *(["--env-file", str(own)] if own.is_file() else [])]
    return ["compose", "--project-directory", str(directory), "-f", str(directory / COMPOSE_FILE.name), *env_files,
            "-p", project, *args]


def installed_site(project: str) -> dict[str, str] | None:
    """The image variables of the site archive installed for ``project`` (None where none is): ``up`` then
    builds nothing and pulls nothing."""
    from deploy.composefile import parse_env

    path = SITES_ROOT / project / SITE_ENV
    return parse_env(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_env_file(stack: LocalStack, env: dict[str, str]) -> Path:
    """The run's variables as an env file (owner-only: it holds the admin token), so that plain ``docker compose``
    commands reach the same stack: ``docker compose ... --env-file deploy/.env --env-file <this> logs``."""
    path = stack.state / ENV_FILE
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("".join(f"{key}={value}\n" for key, value in sorted(env.items())), encoding="utf-8")
    return path


def stack_env(settings: Settings, stack: LocalStack, credentials: Credentials | None,
              bases: dict[str, str]) -> dict[str, str]:
    """The variables compose reads on top of deploy/.env for this run."""
    env = {
        "COMPOSE_PROFILES": ",".join(PROFILES[:2]),
        "TRITON_BASE_DIGEST": UNUSED_NGC_DIGEST,
        "TENSORRT_BASE_DIGEST": UNUSED_NGC_DIGEST,
        "JETSON_TRITON_DIGEST": UNUSED_NGC_DIGEST,  # the jetson profile's base, interpolated but never built here
        "BUILD_NETWORK": stack.build_network,
        "BUILD_CA_BUNDLE": str(stack.ca_bundle()),
        "PROXY_MODELS_VOLUME": "model-repository-cpu",  # the rollout's split, in the CPU stack's volume
        **bases,
        **platform_env(settings, stack),
    }
    if credentials is not None:
        env.update(TLS_DIR=str(credentials.tls_dir), LOADTEST_CA_FILE=str(credentials.ca_cert),
                   TRITON_ADMIN_TOKEN=credentials.admin_token, GRAFANA_ADMIN_PASSWORD=credentials.grafana_password,
                   TRITON_ADMIN_TOKEN_FILE=str(credentials.admin_token_file.resolve()))
    else:  # down without credentials: only interpolation needs them
        env.update(TLS_DIR=str(stack.state), LOADTEST_CA_FILE=str(stack.state), TRITON_ADMIN_TOKEN="unused",
                   GRAFANA_ADMIN_PASSWORD="unused", TRITON_ADMIN_TOKEN_FILE=str(stack.state))
    if stack.publish == "auto":
        env.update(PROXY_HTTP_PORT="0", PROXY_GRPC_PORT="0", PROMETHEUS_PORT="0", GRAFANA_PORT="0", LOCUST_WEB_PORT="0")
    return env


def platform_env(settings: Settings, stack: LocalStack) -> dict[str, str]:
    """With ``--platform``: compose builds and runs every service for it, and the built images' tag names it, so
    another architecture's images never take the default tags (the daemon's own architecture builds under those)."""
    if not stack.platform:
        return {}
    target = parse(stack.platform)
    return {"DOCKER_DEFAULT_PLATFORM": target.docker, "CPU_IMAGE_TAG": f"{settings.cpu_image_tag}-{target.debian}"}


def published(stack: LocalStack, env: dict[str, str], service: str, port: int) -> int:
    """The host port compose published ``service``'s container ``port`` on."""
    answer = docker.run(compose_args(stack.project, "port", service, str(port)), env=env).stdout.strip()
    host_port = answer.rpartition(":")[2]
    if not host_port.isdigit():
        raise LocalStackError(f"{service} publishes no port {port} (docker compose port said {answer!r})")
    return int(host_port)


def endpoints(settings: Settings, stack: LocalStack, env: dict[str, str], credentials: Credentials) -> dict[str, str]:
    """What a client needs: the proxy's two URLs (names the certificate carries), the CA, Prometheus, the key."""
    https = published(stack, env, "pod", settings.proxy_http_port)
    grpcs = published(stack, env, "pod", settings.proxy_grpc_port)
    prometheus = published(stack, env, "prometheus", settings.prometheus_port)
    return {
        "https": f"https://localhost:{https}",
        "grpcs": f"grpcs://localhost:{grpcs}",
        "ca_cert": str(credentials.ca_cert.resolve()),
        "prometheus": f"http://127.0.0.1:{prometheus}",
        "admin_token_file": str(credentials.admin_token_file.resolve()),
    }


def _why_not_healthy(stack: LocalStack, env: dict[str, str]) -> str:
    """Each service that is not running healthy (or, the builder, exited 0), with the end of its log."""
    answer = docker.run(compose_args(stack.project, "ps", "--all", "--format", "json", *UP_SERVICES), env=env,
                        check=False).stdout
    rows = [json.loads(line) for line in answer.splitlines() if line.strip().startswith("{")]
    reasons = []
    for row in rows:
        service, state, health = row.get("Service", "?"), row.get("State", ""), row.get("Health", "")
        fine = (state == "exited" and row.get("ExitCode") == 0) if service == "builder-cpu" else health == "healthy"
        if not fine:
            log = docker.run(compose_args(stack.project, "logs", "--no-log-prefix", "--tail", "5", service), env=env,
                             check=False)
            tail = " | ".join((log.stdout + log.stderr).strip().splitlines()[-5:])
            reasons.append(f"{service}: {state} {health} (exit {row.get('ExitCode')}); log: {tail}")
    return "; ".join(reasons) or "no container of the project is running"


def build(settings: Settings, stack: LocalStack, *, loadtest: bool = False) -> dict[str, str]:
    """Check the engine, pick or make the bases, build the stack's images (layer-cached); the bases chosen."""
    check_engine()
    # The load test drives a site from elsewhere: for another architecture only the stack itself is built.
    loadtest = loadtest and not stack.platform
    bases = resolve_bases(settings, stack.target(), pull=stack.pull, build_network=stack.build_network,
                          skip=() if loadtest or not stack.platform else ("PYTHON_IMAGE",))
    services = (*BUILT_SERVICES, *(("locust-master",) if loadtest else ()))
    logger.info("building %s (cached layers are reused)", ", ".join(services))
    env = stack_env(settings, stack, None, bases)
    images = docker.run(compose_args(stack.project, "config", "--images", *services), env=env).stdout.split()
    before = {image: docker.image_id(image) for image in images}
    docker.run(compose_args(stack.project, "build", *services), env=env, timeout_s=BUILD_TIMEOUT_S, capture=False)
    docker.remove_superseded(before)
    return bases


def up(settings: Settings, stack: LocalStack) -> dict[str, str]:
    """Start the local CPU stack and return its endpoints once every service is healthy."""
    site = installed_site(stack.project)
    if site is not None:
        check_engine()
        logger.info("starting the site installed from an archive: no image is built or pulled")
    bases = site if site is not None else build(settings, stack)
    credentials = ensure_credentials(stack.state, owner=settings.run_as_uid, tls_dir=stack.tls_dir)
    env = stack_env(settings, stack, credentials, bases)
    write_env_file(stack, env)
    logger.info("starting %s and waiting until each is healthy", ", ".join(UP_SERVICES))
    never_pull = ("--pull", "never") if site is not None else ()
    started = docker.run(compose_args(stack.project, "up", "--detach", "--no-build", *never_pull, "--wait",
                                      "--wait-timeout", str(WAIT_TIMEOUT_S), *UP_SERVICES), env=env, capture=False,
                         check=False)
    if started.returncode != 0:
        raise LocalStackError(f"the stack did not become healthy: {_why_not_healthy(stack, env)} "
                              f"(python -m deploy down --local --project {stack.project} removes it)")
    result = endpoints(settings, stack, env, credentials)
    (stack.state / "endpoints.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def read_env_file(stack: LocalStack) -> dict[str, str]:
    """The variables ``up`` used (empty when it never ran or ``down`` removed them)."""
    from deploy.composefile import parse_env

    path = stack.state / ENV_FILE
    return parse_env(path.read_text(encoding="utf-8")) if path.is_file() else {}


def down(stack: LocalStack) -> None:
    """Remove the project's containers, networks and volumes, and its throwaway credentials."""
    docker.run(["version", "--format", "{{.Server.Version}}"])  # a daemon must answer, or nothing can be removed
    env = {**stack_env(Settings(), stack, None, {}), **read_env_file(stack)}
    env["COMPOSE_PROFILES"] = ",".join(PROFILES)
    docker.run(compose_args(stack.project, "down", "--volumes", "--remove-orphans"), env=env, capture=False,
               timeout_s=600.0)
    if stack.state.exists():
        shutil.rmtree(stack.state)
