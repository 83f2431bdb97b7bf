"""``python -m deploy update|rollback --local``: a new model version into the running CPU stack, then its rollout.

``update`` runs the stack's builder once more (``docker compose run builder-cpu``, no network) with the user's ONNX
mounted read-only and any extra ``generator build`` flags: the builder adds it as the next version of the
versioned repository in the volume (deploy/entrypoints/build_models.py ``--versioned``), beside the stable one Triton serves.
Then the one-shot ``rollout-cpu`` service tries it on a share of the traffic, in the pod's network namespace with
the admin token from its secret file, and promotes (and watches) it or rolls it back by itself
(deploy/entrypoints/rollout_job.py). ``rollback`` runs the same service with ``--rollback``.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from deploy import commands
from deploy.errors import LocalStackError
from deploy.local import docker
from deploy.local.stack import LocalStack, compose_args, read_env_file
from deploy.settings import Settings
from generator.operate.rollout.outcome import WORDS

logger = logging.getLogger(__name__)

UPDATE_ONNX = "/opt/detector/update.onnx"  # where the user's ONNX is mounted in the builder
CONTROL_DIR = "/control"  # where the user's control images are mounted in the rollout
STEP_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Update:
    onnx: Path | None = None  # None: the ONNX baked into the builder image
    build_flags: tuple[str, ...] = ()  # extra `generator build` flags (e.g. --conf-threshold 0.5)
    rollout_flags: tuple[str, ...] = ()  # extra `generator rollout` flags (e.g. --window-s 300)
    control_images: Path | None = None
    control_labels: Path | None = None
    # The builder alone from images of another tag (a newer site archive's, whose builder carries its ONNX and
    # settings); the running services and the rollout keep theirs.
    builder_tag: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _env(stack: LocalStack) -> dict[str, str]:
    env = read_env_file(stack)
    if not env:
        raise LocalStackError(f"the local stack {stack.project} is not up (python -m deploy up --local --project "
                              f"{stack.project})")
    return env


def builder_args(settings: Settings, update: Update) -> list[str]:
    """The builder's arguments: the rendered ones, the user's ONNX in place of the baked one, the extra flags."""
    args = commands.builder_command(settings, "embedded")
    if update.onnx is not None:
        args[args.index("--onnx") + 1] = UPDATE_ONNX
    return [*args, *update.build_flags]


def _mounts(stack: LocalStack, pairs: list[tuple[Path | None, str]]) -> list[str]:
    """Read-only bind mounts of the user's files, copied first beside the stack's state with modes the
    containers' uid can read (a 0600 file of root's would not open inside)."""
    import shutil

    out: list[str] = []
    for host, target in pairs:
        if host is None:
            continue
        if not host.exists():
            raise LocalStackError(f"{host} does not exist")
        copy = stack.state / "update" / target.strip("/").replace("/", "_")
        if copy.is_dir():
            shutil.rmtree(copy)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if host.is_dir():
            shutil.copytree(host, copy)
            for path in (copy, *copy.rglob("*")):
                path.chmod(0o755 if path.is_dir() else 0o644)
        else:
            shutil.copyfile(host, copy)
            copy.chmod(0o644)
        out += ["-v", f"{copy.resolve()}:{target}:ro"]
    return out


def build_version(settings: Settings, stack: LocalStack, update: Update) -> None:
    """Add the version (or reuse the one these settings built); the builder's log goes to stderr."""
    env = _env(stack)
    if update.builder_tag is not None:  # --no-deps: only the one-off builder reads it
        env = {**env, "CPU_IMAGE_TAG": update.builder_tag}
    mounts = _mounts(stack, [(update.onnx, UPDATE_ONNX)])
    started = time.monotonic()
    result = docker.run(compose_args(stack.project, "run", "--rm", "--no-deps", *mounts, "builder-cpu",
                                     *builder_args(settings, update)),
                        env=env, capture=False, check=False, timeout_s=STEP_TIMEOUT_S)
    update.timings["build_s"] = round(time.monotonic() - started, 1)
    if result.returncode != 0:
        raise LocalStackError(f"the builder could not add the version (exit {result.returncode}); the stable "
                              "version keeps serving")


def run_rollout(stack: LocalStack, update: Update, *extra: str) -> tuple[int, dict[str, object]]:
    """Run the rollout service once; its exit code (0 promoted, 3 rolled back, 4 undecided: the stable version
    serves, the candidate stays one) and its decision record."""
    env = _env(stack)
    flags = [*update.rollout_flags, *extra]
    if update.control_images is not None:
        flags += ["--control-images", CONTROL_DIR]
    if update.control_labels is not None:
        flags += ["--control-labels", f"{CONTROL_DIR}-labels.json"]
    mounts = _mounts(stack, [(update.control_images, CONTROL_DIR),
                             (update.control_labels, f"{CONTROL_DIR}-labels.json")])
    started = time.monotonic()
    # --no-deps: `compose run` recreates every dependency whose configuration differs from the running container's
    # (docker/compose #13769), and a site whose files moved to a promoted archive's tag differs from the Triton and
    # proxy it still runs: the next update recreated both mid-rollout (5,021 requests failed, 502 at the proxy, live).
    # The stack is up (_env); the rollout only joins the pod's namespace.
    result = docker.run(compose_args(stack.project, "run", "--rm", "-T", "--no-deps", *mounts, "rollout-cpu",
                                     *flags), env=env, check=False, timeout_s=STEP_TIMEOUT_S)
    update.timings["rollout_s"] = round(time.monotonic() - started, 1)
    sys.stderr.write(result.stderr)
    if result.returncode not in WORDS:
        raise LocalStackError(f"the rollout failed (exit {result.returncode}): {result.stderr.strip()[-800:]}")
    return result.returncode, json.loads(result.stdout[result.stdout.index("{"):])


def update(settings: Settings, stack: LocalStack, change: Update) -> tuple[int, dict[str, object]]:
    """Build the next version, then roll it out; exit code and the decision record with both steps' times."""
    build_version(settings, stack, change)
    code, record = run_rollout(stack, change)
    record["deploy_update"] = dict(change.timings)
    return code, record


def parse_flags(text: str | None) -> tuple[str, ...]:
    return tuple(shlex.split(text)) if text else ()
