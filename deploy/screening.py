"""What the proxy's public ports accept, and what they refuse before Triton sees it (docs/SECURITY.md).

Triton 2.51 (the only embeddable release) crashes on requests that later releases refuse: a JSON body
nesting 150,000 arrays overflows RapidJSON's recursion (120 kB is enough, 40 kB is not), chunked floods
exhaust its memory. The proxy therefore caps the JSON part of every inference request: the whole body when
it is pure JSON, the ``Inference-Header-Content-Length`` of a binary one. A real request of this project is
a JSON header of a few hundred bytes (one BYTES input, four outputs, binary data); the cap leaves room for
request parameters and still bounds nesting, the outputs a request may name and its shapes to a size 2.51
parses safely (tests/deploy/test_front_door_integration.py sends each at the cap to a real 2.51).
"""

from __future__ import annotations

from typing import Any

from deploy.settings import Settings

# The JSON part of one inference request, bytes. Ten times under the 40 kB of nesting 2.51 survives.
MAX_INFER_JSON_BYTES = 4096
# Request line and headers: nginx's default buffers (4 x 8 KiB); a longer header line is refused with 431.
HEADER_BUFFERS = "4 8k"
# Slow clients: seconds to send the headers, and between two reads of the body; a response that stalls.
CLIENT_HEADER_TIMEOUT_S = 10
CLIENT_BODY_TIMEOUT_S = 15
SEND_TIMEOUT_S = 30
KEEPALIVE_TIMEOUT_S = 30
# Connections one client address may hold open at once. Docker's port publishing shows every host client
# with the bridge's address, so this is also the stack's ceiling there: room for a 200-user load test.
CONNECTIONS_PER_CLIENT = 512
# While Triton restarts (about 2 s after its process dies), clients are told to come back after this.
RETRY_AFTER_S = 2
# gRPC methods the public port routes (grpc_service.proto); the admin, repository, statistics, trace,
# logging and shared-memory RPCs are not routed at all. ModelConfig stays: Triton's key guards it.
PUBLIC_GRPC_METHODS = ("ModelInfer", "ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
                       "ModelMetadata", "ModelConfig")


def at_most(limit: int) -> str:
    """A regular expression matching the decimal integers 0..limit without leading zeros (nginx map syntax)."""
    digits = str(limit)
    options = ["0"]
    if len(digits) > 1:
        options.append(f"[1-9][0-9]{{0,{len(digits) - 2}}}" if len(digits) > 2 else "[1-9]")
    for i, digit in enumerate(digits):
        low = 1 if i == 0 else 0
        if int(digit) > low:
            rest = len(digits) - i - 1
            options.append(digits[:i] + f"[{low}-{int(digit) - 1}]" + ("[0-9]" * rest))
    options.append(digits)
    return "^(" + "|".join(options) + ")$"


def context(settings: Settings) -> dict[str, Any]:
    """The template's names for the screening rules."""
    return {
        "max_json": MAX_INFER_JSON_BYTES,
        "json_length_re": at_most(MAX_INFER_JSON_BYTES),
        "header_buffers": HEADER_BUFFERS,
        "header_timeout_s": CLIENT_HEADER_TIMEOUT_S,
        "body_timeout_s": CLIENT_BODY_TIMEOUT_S,
        "send_timeout_s": SEND_TIMEOUT_S,
        "keepalive_timeout_s": KEEPALIVE_TIMEOUT_S,
        "connections_per_client": CONNECTIONS_PER_CLIENT,
        "retry_after_s": RETRY_AFTER_S,
        "grpc_methods_re": "^/inference\\.GRPCInferenceService/(" + "|".join(PUBLIC_GRPC_METHODS) + ")$",
        "model_name_re": "[A-Za-z0-9_.-]+",
    }
