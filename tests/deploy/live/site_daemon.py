"""A second ``dockerd`` that plays a site with no network: its own data root, socket and containerd namespace (so
its image store starts empty), no bridge of its own, no iptables rules (no masquerade: its containers reach
nothing outside the host) and a proxy that answers nothing for any pull. Used by the live lane's site test and the
emulated lane's arm64 site."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.local import site

REPO = Path(__file__).resolve().parents[3]
NO_PROXY_ANSWERS = "http://127.0.0.1:9"  # the site daemon's proxy for pulls: nothing listens there
TIMEOUT_S = 1800


@dataclass
class SiteDaemon:
    """The site's dockerd: its environment (``DOCKER_HOST``) for the docker and deploy commands."""

    env: dict[str, str]
    built: dict[str, str]  # image names the deploy commands build under (read by compose before deploy/.env)

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["docker", *args], env={**os.environ, **self.env}, capture_output=True, text=True,
                                timeout=300, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"site docker {' '.join(args[:3])} failed: {result.stderr[-1000:]}")
        return result

    def deploy(self, *args: str) -> subprocess.CompletedProcess[str]:
        return deploy(*args, env={**self.built, **self.env})

    def images(self) -> list[str]:
        return self.docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()


def deploy(*args: str, env: dict[str, str] | None = None, timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python -m deploy ARGS`` from the repository, its output captured."""
    return subprocess.run([sys.executable, "-m", "deploy", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, check=False, env={**os.environ, **(env or {})})


def make_site_archive(out: Path, maker: str, tag: str, *extra: str, env: dict[str, str] | None = None
                      ) -> tuple[Path, dict[str, Any], float]:
    """``deploy archive --local`` of the ``maker`` project into ``out``: the archive, its index and the seconds."""
    started = time.monotonic()
    made = deploy("archive", "--local", "--project", maker, "--no-pull", "--tag", tag, "--output", str(out), *extra,
                  env=env)
    make_s = time.monotonic() - started
    assert made.returncode == 0, f"deploy archive {' '.join(extra)} failed: {made.stderr[-3000:]}"
    (path,) = [Path(p) for p in json.loads(made.stdout.strip().splitlines()[-1])["archive"]]
    with tarfile.open(path) as tar:
        handle = tar.extractfile(site.INDEX)
        index = json.loads(handle.read() if handle else b"")
    return path, index, make_s


@contextmanager
def running_site_daemon(name: str, log: Path, project: str, built: dict[str, str]) -> Iterator[SiteDaemon]:
    """Start the site's dockerd (``name``: its folder under /var/tmp and containerd namespace); at the end bring
    ``project`` down there, stop it and remove everything it made."""
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        raise AssertionError("a site test starts a second dockerd: it needs the dockerd binary and root")
    root = Path(f"/var/tmp/{name}")  # short: the socket path must fit in sun_path
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "docker.sock"
    command = ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "--pidfile",
               str(root / "dockerd.pid"), "-H", f"unix://{socket}", "--bridge", "none", "--iptables=false",
               "--ip6tables=false", "--ip-masq=false", "--containerd-namespace", name,
               "--containerd-plugins-namespace", f"{name}-plugins",
               "--default-address-pool", f"base=10.{200 + os.getpid() % 50}.0.0/16,size=24"]
    proxy = {"HTTP_PROXY": NO_PROXY_ANSWERS, "HTTPS_PROXY": NO_PROXY_ANSWERS, "NO_PROXY": ""}
    with log.open("w") as sink:
        daemon = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **proxy})
    handle = SiteDaemon({"DOCKER_HOST": f"unix://{socket}"}, built)
    try:
        deadline = time.monotonic() + 60
        while handle.docker("info", check=False).returncode != 0:
            assert daemon.poll() is None and time.monotonic() < deadline, f"the site dockerd: {log.read_text()[-2000:]}"
            time.sleep(0.5)
        yield handle
    finally:
        handle.deploy("down", "--local", "--project", project)
        from deploy.local import site

        shutil.rmtree(site.site_dir(project), ignore_errors=True)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(root, ignore_errors=True)
