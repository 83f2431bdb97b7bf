"""Rules for the proxy's front door (issue 37, docs/SECURITY.md): what the public ports route and refuse.

Only inference, health and model metadata reach Triton; every inference location caps the JSON part and
refuses chunked bodies; TLS 1.2 offers AEAD suites only, with HSTS; slow clients time out and hold a bounded
number of connections; a Triton that is down answers 503 JSON with Retry-After (HTTP) or UNAVAILABLE (gRPC).
"""

from __future__ import annotations

import re

from deploy import screening
from deploy.settings import Settings

_SCREEN = ("limit_except POST {", "if ($http_transfer_encoding)", 'if ($http_content_encoding !~* "^(identity)?$")',
           'if ($infer_json_refusal = "body")',
           'if ($infer_json_refusal = "header")')
_AEAD = ("GCM", "CHACHA20")


def _text(conf: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in conf.splitlines())


def _locations(text: str) -> list[tuple[str, str]]:
    """Each ``location ... {`` line's argument and its body (up to the matching brace)."""
    found: list[tuple[str, str]] = []
    for match in re.finditer(r"location\s+([^{]+?)\s*\{", text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        found.append((match.group(1).strip(), text[match.end():i - 1]))
    return found


def _tls_violations(text: str, where: str) -> list[str]:
    ciphers = re.findall(r"ssl_ciphers\s+([^;]+);", text)
    suites = ciphers[0].split(":") if len(ciphers) == 1 else []
    if not suites or any(not s.startswith("ECDHE-") or not any(a in s for a in _AEAD) for s in suites):
        return [f"{where}: ssl_ciphers must list forward-secret AEAD suites only (ECDHE with GCM or "
                f"CHACHA20-POLY1305, no CBC), got {ciphers}"]
    if text.count('add_header Strict-Transport-Security "max-age=') != 2:
        return [f"{where}: both TLS servers must send Strict-Transport-Security"]
    return []


def _route_violations(locations: list[tuple[str, str]], where: str) -> list[str]:
    problems = []
    infer = [body for name, body in locations if name.endswith(('/infer', '/infer$"'))]
    if len(infer) != 2 or any(not all(rule in body for rule in _SCREEN) for body in infer):
        problems.append(f"{where}: every inference location must screen its request "
                        f"({', '.join(_SCREEN)})")
    proxied = [name for name, body in locations if "proxy_pass" in body or "grpc_pass" in body]
    if any(not name.startswith(("=", "~")) for name in proxied):
        problems.append(f"{where}: only exact or pattern locations (inference, health, metadata, the listed "
                        f"RPCs) may reach Triton; the catch-all must refuse, got {proxied}")
    grpc = [name for name, body in locations if "grpc_pass" in body]
    if grpc != [f'~ "{screening.context(Settings())["grpc_methods_re"]}"']:
        problems.append(f"{where}: gRPC must route only {', '.join(screening.PUBLIC_GRPC_METHODS)}, got {grpc}")
    return problems


def _json_maps() -> str:
    """The two maps deciding an inference request's JSON refusal, exactly (nothing else may pass)."""
    cap = screening.at_most(screening.MAX_INFER_JSON_BYTES)
    return (f'map "$http_inference_header_content_length" $infer_json_header {{ "" "absent"; "~{cap}" ""; '
            f'default "refuse"; }} map "$infer_json_header:$content_length" $infer_json_refusal {{ "~^:" ""; '
            f'"absent:" ""; "~^absent:{cap[1:]}" ""; "~^absent:" "body"; default "header"; }}')


def front_door_violations(conf: str, where: str = "proxy/nginx.conf") -> list[str]:
    text = _text(conf)
    problems = _tls_violations(text, where) + _route_violations(_locations(text), where)
    if " ".join(_json_maps().split()) not in " ".join(text.split()):
        problems.append(f"{where}: the JSON part of an inference request must be capped at "
                        f"{screening.MAX_INFER_JSON_BYTES} bytes (deploy/screening.py)")
    for directive in ("client_header_timeout", "client_body_timeout", "send_timeout", "large_client_header_buffers"):
        if len(re.findall(rf"(?:^|\s){directive}\s+[^;]+;", text)) != 1:
            problems.append(f"{where}: {directive} must be set once (slow or oversized clients)")
    if text.count(f"limit_conn per_client {screening.CONNECTIONS_PER_CLIENT};") != 2:
        problems.append(f"{where}: both TLS servers must limit connections per client "
                        f"({screening.CONNECTIONS_PER_CLIENT})")
    if "error_page 502 504 =503 @triton_unavailable;" not in text or "grpc-status 14 always;" not in text:
        problems.append(f"{where}: a Triton that is down must answer 503 with Retry-After (HTTP) and "
                        f"grpc-status 14 UNAVAILABLE (gRPC)")
    return problems
