"""Container health check that proves the ensemble answers, not just that the server process is up.

Before 26.04, ``/v2/health/ready`` stays green when a Python-backend stub has died, and the stub is
no longer restarted (since 24.06). So this check asks every model for readiness and then runs one
real inference of a tiny embedded JPEG through the ensemble. It is copied into the Triton image and
run by the compose healthcheck and the Kubernetes readiness probe: standard library only, exit 0
when healthy, 1 with one line on stderr otherwise.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import struct
import sys
from collections.abc import Sequence

# 32x32 grey JPEG with a coloured square (735 bytes): decodes everywhere, exercises the full path.
PROBE_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAA0JCgsKCA0LCgsODg0PEyAVExISEyccHhcgLikxMC4pLSwzOko+MzZGNywtQFdBRkxO"
    "UlNSMj5aYVpQYEpRUk//2wBDAQ4ODhMREyYVFSZPNS01T09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09P"
    "T09PT09PT0//wAARCAAgACADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUF"
    "BAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVW"
    "V1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi"
    "4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAEC"
    "AxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVm"
    "Z2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq"
    "8vP09fb3+Pn6/9oADAMBAAIRAxEAPwCtRRW/XJisV7C2l7m1Kl7S+pgUVv1iXH/HxJ/vn+dLDYv27ataw6tH2avcjrfrAqTz5v8A"
    "nrJ/30aMXhnXtZ2sFGqqd7m3WJcf8fEn++f50efN/wA9ZP8Avo0wkkkk5J71OEwjoNtu9wrVlUSSR//Z"
)

INPUT_NAME = "IMAGE"
COUNT_OUTPUT = "num_detections"


class HealthError(Exception):
    """The server or one of its models is not able to serve."""


def _request(
    address: str,
    method: str,
    path: str,
    timeout: float,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host or address, int(port) if port else 8000, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    except OSError as exc:
        raise HealthError(f"cannot reach Triton at {address}: {exc}") from exc
    finally:
        conn.close()


def check_models_ready(address: str, models: Sequence[str], timeout: float) -> None:
    """Every listed model (the ensemble and each composing model) must answer 200 on its ready URL."""
    for model in models:
        status, _ = _request(address, "GET", f"/v2/models/{model}/ready", timeout)
        if status != 200:
            raise HealthError(f"model {model} is not ready (HTTP {status})")


def build_infer_body(image: bytes) -> tuple[bytes, int]:
    """KServe v2 binary-tensor request: JSON header, then the BYTES element as <u32 length><data>."""
    element = struct.pack("<I", len(image)) + image
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": INPUT_NAME,
                    "shape": [1, 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(element)},
                }
            ],
            "outputs": [{"name": COUNT_OUTPUT, "parameters": {"binary_data": False}}],
        }
    ).encode()
    return header + element, len(header)


def check_inference(address: str, model: str, timeout: float) -> int:
    """Run the probe image through the ensemble; return its detection count."""
    body, header_len = build_infer_body(PROBE_JPEG)
    status, payload = _request(
        address,
        "POST",
        f"/v2/models/{model}/infer",
        timeout,
        body,
        {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(header_len),
        },
    )
    if status != 200:
        raise HealthError(f"inference on {model} failed (HTTP {status}): {payload[:200]!r}")
    try:
        outputs = {o["name"]: o for o in json.loads(payload)["outputs"]}
        count = int(outputs[COUNT_OUTPUT]["data"][0])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise HealthError(f"inference on {model} returned no {COUNT_OUTPUT}: {payload[:200]!r}") from exc
    if count < 0:
        raise HealthError(f"inference on {model} returned a negative detection count {count}")
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP host:port")
    parser.add_argument("--ensemble", required=True, help="ensemble name, e.g. yolo")
    parser.add_argument("--models", required=True, help="comma-separated composing models that must be ready")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per HTTP call")
    parser.add_argument("--no-infer", action="store_true", help="only check readiness")
    args = parser.parse_args(argv)
    models = [args.ensemble, *(m for m in args.models.split(",") if m)]
    try:
        check_models_ready(args.url, models, args.timeout)
        if not args.no_infer:
            check_inference(args.url, args.ensemble, args.timeout)
    except HealthError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
