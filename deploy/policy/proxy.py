"""Rules for the proxy's nginx.conf: TLS on both listeners, the body limit from the build, loopback upstreams."""

from __future__ import annotations

import re

from deploy import commands, sizing
from deploy.policy.front_door import front_door_violations
from deploy.settings import Settings


def _directives(conf: str, name: str) -> list[str]:
    """Arguments of every ``name ...;`` directive, comments stripped."""
    text = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    return [m.strip() for m in re.findall(rf"(?:^|[;{{}}\s]){name}\s+([^;{{}}]*);", text)]


def proxy_violations(conf: str, settings: Settings, where: str = "proxy/nginx.conf") -> list[str]:
    problems = []
    limit = str(sizing.max_request_bytes(settings))
    if _directives(conf, "client_max_body_size") != [limit]:
        problems.append(f"{where}: client_max_body_size must be {limit} once (deploy/sizing.py), "
                        f"got {_directives(conf, 'client_max_body_size')}")
    listens = _directives(conf, "listen")
    # TLS on both client listeners; the health endpoint plain, on loopback only (inside the pod).
    want = [f"{settings.proxy_http_port} ssl", f"{settings.proxy_grpc_port} ssl http2",
            f"127.0.0.1:{settings.proxy_health_port}"]
    if sorted(listens) != sorted(want):
        problems.append(f"{where}: listeners must be exactly {want} (TLS on both, health on loopback), got {listens}")
    upstreams = _directives(conf, "server")
    want_up = [f"127.0.0.1:{settings.http_port}", f"127.0.0.1:{settings.grpc_port}"]
    if sorted(upstreams) != sorted(want_up):
        problems.append(f"{where}: upstreams must be Triton on loopback {want_up}, got {upstreams}")
    passes = {"http://triton_http", "http://triton_http/v2/health/ready"}
    if _directives(conf, "grpc_pass") != ["grpc://triton_grpc"] or set(_directives(conf, "proxy_pass")) != passes:
        problems.append(f"{where}: gRPC must go through grpc_pass and HTTP through proxy_pass to the upstreams")
    protocols = " ".join(_directives(conf, "ssl_protocols")).split()
    if not protocols or set(protocols) - {"TLSv1.2", "TLSv1.3"}:
        problems.append(f"{where}: ssl_protocols must be TLSv1.2/TLSv1.3 only, got {protocols}")
    if "grpc-status 8" not in conf:
        problems.append(f"{where}: an oversized gRPC request must end with grpc-status 8 (RESOURCE_EXHAUSTED)")
    return problems + canary_violations(conf, settings, where) + front_door_violations(conf, where)


def canary_violations(conf: str, settings: Settings, where: str = "proxy/nginx.conf") -> list[str]:
    """The weighted split is there exactly when the settings ask for one, with their share and models."""
    text = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    splits = re.findall(r"split_clients\s+(.*?)\s*\{\s*$", text, re.MULTILINE)
    if settings.canary_percent <= 0:
        return _rollout_split_violations(text, splits, settings, where)
    share = f'{settings.canary_percent:g}% "{settings.canary_model}";'
    rewrite = "^ /v2/models/$ensemble_target/infer break"
    if ([s.strip() for s in splits] != ['"${request_id}" $ensemble_target'] or share not in text
            or f'* "{settings.model_name}";' not in text or _directives(conf, "rewrite") != [rewrite]
            or f"location = /v2/models/{settings.model_name}/infer" not in text):
        return [f"{where}: canary_percent {settings.canary_percent:g} needs split_clients sending "
                f"{settings.canary_percent:g}% of /v2/models/{settings.model_name}/infer to {settings.canary_model} "
                f"and the rest to {settings.model_name}"]
    return []


def _rollout_split_violations(text: str, splits: list[str], settings: Settings, where: str) -> list[str]:
    """Without a rendered canary: the rollout's split (deploy/entrypoints/routing.py), 100 buckets of 1 %, alias by default,
    the candidate only where the rollout published its bucket under the routing folder."""
    buckets = re.findall(r'^\s*1% "(\d+)";\s*$', text, re.MULTILINE)
    want_buckets = [str(b) for b in range(commands.CANARY_BUCKETS - 1)]
    found = [
        [s.strip() for s in splits] == ['"${request_id}" $canary_bucket'],
        buckets == want_buckets and f'* "{commands.CANARY_BUCKETS - 1}";' in text,
        f"root {commands.ROUTING_DIR}/canary;" in text,
        f'set $ensemble_target "{settings.model_name}";' in text,
        "if (-f $document_root/$canary_bucket)" in text,
        _directives(text, "rewrite") == ["^ /v2/models/$ensemble_target/infer break"],
        f"location = /v2/models/{settings.model_name}/infer" in text,
    ]
    if all(found):
        return []
    return [f"{where}: the rollout's split must send /v2/models/{settings.model_name}/infer to {settings.model_name} "
            f"unless {commands.ROUTING_DIR}/canary/<bucket of 100> exists (deploy/entrypoints/routing.py)"]
