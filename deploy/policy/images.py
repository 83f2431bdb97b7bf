"""Dockerfile rules (pinned bases, the right package extra, non-root) and the extras they install."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from deploy import commands
from deploy.policy.commands import release_violation
from deploy.settings import Settings, is_digest, is_pinned

_USER_RE = re.compile(r"^USER\s+(\S+)", re.M)
_FROM_RE = re.compile(r"^FROM\s+(\S+)", re.M)
_PIP_RE = re.compile(r'pip install\s+(?:--[a-z-]+\s+)*"?/opt/project\[([a-z0-9_,-]+)\]"?')
# BuildKit fetches a `# syntax=` frontend from Docker Hub before it builds: with no registry nothing builds.
_SYNTAX_RE = re.compile(r"^#\s*syntax\s*=", re.I | re.M)


def _arg_default(text: str, name: str) -> list[str]:
    return re.findall(rf"^ARG\s+{name}=(\S*)\s*$", text, re.M)


# image -> (NGC base repository and its digest argument) or (None, the pinned image's build argument)
DOCKERFILES = {
    "triton": ("nvcr.io/nvidia/tritonserver", "TRITON_BASE_DIGEST"),
    "builder": ("nvcr.io/nvidia/tensorrt", "TENSORRT_BASE_DIGEST"),
    "loadtest": (None, "PYTHON_IMAGE"),
    "triton-cpu": (None, "DEBIAN_IMAGE"),
    "builder-cpu": (None, "DEBIAN_IMAGE"),
}
# The stand-ins `deploy bases --local` builds on the local Debian base (deploy/docker/local/).
LOCAL_DOCKERFILES = ("python", "nginx", "prometheus")


def _ngc_base(text: str, name: str, repo: str, digest_arg: str) -> list[str]:
    problems = []
    releases = _arg_default(text, "TRITON_RELEASE")
    if len(releases) != 1:
        problems.append(f"{name}: need one 'ARG TRITON_RELEASE=<yy.mm>' default, found {releases}")
    else:
        problems += release_violation(releases[0], name)
    digests = _arg_default(text, digest_arg)
    if len(digests) != 1 or (digests[0] and not is_digest(digests[0])):
        problems.append(f"{name}: need one 'ARG {digest_arg}=' (empty: required at build time, or sha256:<64 hex>)")
    expected = f"{repo}:${{TRITON_RELEASE}}-py3@${{{digest_arg}}}"
    if _FROM_RE.findall(text) != [expected]:
        problems.append(f"{name}: FROM must be exactly {expected} (tag and digest), got {_FROM_RE.findall(text)}")
    return problems


def _pinned_base(text: str, name: str, arg: str) -> list[str]:
    """Every stage starts from the build argument ``arg``, which defaults to a pinned image."""
    images = _arg_default(text, arg)
    problems = []
    if len(images) != 1 or not is_pinned(images[0]):
        problems.append(f"{name}: 'ARG {arg}=' must default to a name:tag@sha256:<digest> image, got {images}")
    if not _FROM_RE.findall(text) or set(_FROM_RE.findall(text)) != {f"${{{arg}}}"}:
        problems.append(f"{name}: every FROM must be ${{{arg}}}, got {_FROM_RE.findall(text)}")
    return problems


def local_dockerfile_violations(text: str, name: str) -> list[str]:
    """A local stand-in starts from the (pinned, or locally made) Debian base and fetches no frontend."""
    problems = _pinned_base(text, name, "DEBIAN_IMAGE")
    if _SYNTAX_RE.search(text):
        problems.append(f"{name}: no `# syntax=` line (BuildKit would fetch that frontend from a registry)")
    return problems


def dockerfile_violations(text: str, image: str, settings: Settings) -> list[str]:
    """Base pinned by tag and digest, the image's extras (and only those) installed, final USER non-root."""
    # The Jetson images' iGPU base has its own rule (deploy/policy/jetson.py), which calls this for the rest.
    repo, arg = DOCKERFILES.get(image, (None, ""))
    name = f"{image}.Dockerfile"
    problems = _ngc_base(text, name, repo, arg) if repo else _pinned_base(text, name, arg) if arg else []
    if _SYNTAX_RE.search(text):
        problems.append(f"{name}: no `# syntax=` line (BuildKit would fetch that frontend from a registry)")
    extras = _PIP_RE.findall(text)
    wanted = ",".join(commands.image_extras(settings, image))
    if extras != ([wanted] if wanted else []):
        what = f"the project's [{wanted}] extras" if wanted else "none of the project's extras (a locked environment)"
        problems.append(f"{name}: must install exactly {what}, got {extras}")
    users = _USER_RE.findall(text)
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problems.append(f"{name}: the final USER must be non-root, got {users[-1:] or 'none'}")
    if re.search(r"^(ENTRYPOINT|CMD).*pip\s+install", text, re.M):
        problems.append(f"{name}: pip install at container start; install at image build time")
    if image.startswith("triton") and f"COPY generator/server/watchdog.py {commands.WATCHDOG_PATH}" not in text:
        problems.append(f"{name}: must copy generator/server/watchdog.py to {commands.WATCHDOG_PATH} (probes)")
    if image == "triton-cpu" and not _prepares_cpu_stubs(text):
        problems.append(f"{name}: must prepare the pinned server and the locked stub environment with "
                        "`python -m generator.server.prepare --stub-env cpu` (or ${STUB_ENV}, an ARG of default cpu) "
                        "at image build time")
    if image.startswith("builder") and "-m generator build --prepare" not in text:
        problems.append(f"{name}: must prepare Triton 2.51's config schema at image build time (the builder "
                        "runs with no network)")
    if image.startswith("builder") and 'ENTRYPOINT ["python3", "-m", "deploy.entrypoints.build_models"]' not in text:
        problems.append(f"{name}: the entry point must be python3 -m deploy.entrypoints.build_models (atomic volume switch)")
    return problems


# The first opencv-python(-headless) release whose bundled libwebp (1.3.2) has the CVE-2023-4863 fix.
OPENCV_FLOOR = (4, 8, 1, 78)
_OPENCV = ("opencv-python-headless", "opencv-python")

# Packages that must stay out of the builder images: Locust (a load generator has no place where models are built).
# The builders also run the rollout (the `rollout` extra: the clients, tritonclient[http] among them), which
# tritonclient 2.73 allows on the NGC images' CPython 3.12: it needs geventhttpclient >= 2.3.3, which has cp312
# wheels (2.51 pinned 2.0.2, which had none: why the HTTP client was kept out before).
_BUILDER_FORBIDDEN = ("locust",)
_PROJECT = "triton-detection-ensemble"


def _requirement_name(requirement: str) -> tuple[str, set[str]]:
    match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", requirement)
    if match is None:
        return requirement.strip().lower(), set()
    return match.group(1).lower().replace("_", "-"), {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}


def extras_violations(pyproject: Mapping[str, Any], images: Sequence[str] = tuple(DOCKERFILES)) -> list[str]:
    """The extras the Dockerfiles install exist, and the builder's pulls in no HTTP client or Locust."""
    project = pyproject.get("project") or {}
    extras = project.get("optional-dependencies") or {}
    needed = {extra: image for image in images for extra in commands.IMAGE_EXTRAS[image]}
    needed.setdefault("gpu", "triton")  # preprocess_device=gpu
    problems = [f"pyproject.toml: no [{extra}] extra for the {image} image"
                for extra, image in needed.items() if extra not in extras]
    everywhere = [*(project.get("dependencies") or []), *(r for reqs in extras.values() for r in reqs)]
    problems += _opencv_floor_violations(everywhere)
    installed = ",".join(commands.IMAGE_EXTRAS["builder"])
    for requirement in _with_extras(project.get("dependencies") or [], extras, commands.IMAGE_EXTRAS["builder"]):
        name, _ = _requirement_name(requirement)
        if name in _BUILDER_FORBIDDEN:
            problems.append(f"pyproject.toml: the builder image would install {requirement!r} "
                            f"(base dependencies + [{installed}]); keep it in another extra")
    return problems


def _with_extras(base: Sequence[str], extras: Mapping[str, Sequence[str]], chosen: Sequence[str]) -> list[str]:
    """The requirements an install of ``chosen`` extras pulls in, the project's own extras followed."""
    out, todo, seen = list(base), list(chosen), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras.get(extra, []):
            name, wanted = _requirement_name(requirement)
            if name == _PROJECT:
                todo += sorted(wanted)
            else:
                out.append(requirement)
    return out


def _opencv_floor_violations(requirements: Sequence[str]) -> list[str]:
    """OpenCV decodes untrusted WebP in the preprocess step: its floor must carry the libwebp fix."""
    problems = []
    for requirement in requirements:
        name, _ = _requirement_name(requirement)
        if name not in _OPENCV:
            continue
        floor = re.search(r">=\s*([0-9][0-9.]*)", requirement)
        version = tuple(int(part) for part in floor.group(1).split(".")) if floor else ()
        if version < OPENCV_FLOOR:
            problems.append(f"pyproject.toml: {requirement!r} admits releases whose bundled libwebp has "
                            f"CVE-2023-4863; require >={'.'.join(map(str, OPENCV_FLOOR))}")
    return problems


def _prepares_cpu_stubs(text: str) -> bool:
    """The CPU image prepares the CPU stub environment: literally, or from its STUB_ENV build argument, cpu unless a
    build asks for openvino (--cpu-engine openvino)."""
    if "-m generator.server.prepare --stub-env cpu" in text:
        return True
    return (re.search(r"^ARG STUB_ENV=cpu$", text, re.M) is not None
            and '-m generator.server.prepare --stub-env "${STUB_ENV}"' in text)
