"""`python -m clients.detect IMAGE...`: run images through the served ensemble, print or draw the results."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from clients import admin_token
from clients.detection import DetectionResult
from clients.errors import ClientError
from clients.retry import DEFAULT_RETRY
from clients.sync_client import DEFAULT_URL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clients.detect",
        description="Detect objects in images with the Triton detection ensemble.",
    )
    parser.add_argument(
        "images", nargs="+", type=Path, metavar="IMAGE", help="image files (JPEG, PNG, BMP, WebP, TIFF)"
    )
    parser.add_argument(
        "--url",
        default=DEFAULT_URL,
        help="server: host:port (gRPC), or grpc://, grpcs://, http://, https:// URL (default: %(default)s)",
    )
    parser.add_argument("--protocol", choices=("grpc", "http"), help="protocol when the URL has no scheme")
    parser.add_argument("--model", default="yolo", help="ensemble name (default: %(default)s)")
    parser.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="per-request deadline in seconds, retries included"
    )
    parser.add_argument(
        "--retries", type=int, default=DEFAULT_RETRY.attempts - 1, metavar="N",
        help="resend a request the server could not take (overload, restart) up to N times (default: %(default)s)",
    )
    admin_token.add_arguments(parser, "for the class names in the restricted model config")
    parser.add_argument(
        "--ca-cert", type=Path, metavar="PATH",
        help="CA certificate a grpcs:// or https:// server's certificate is signed by (a deployment's own CA; "
             "default: the system's trust store)",
    )
    parser.add_argument(
        "--model-config", type=Path, metavar="PATH",
        help="the ensemble's config.pbtxt (or its folder) shipped with the client: class names without the key",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per image and line")
    parser.add_argument(
        "--annotate", type=Path, metavar="OUTDIR", help="write copies with boxes drawn into OUTDIR"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=8,
        metavar="N",
        help="images per call; the server's batch limit also applies",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage or help
        return int(exc.code or 0)
    if args.batch < 1:
        return _fail("--batch must be at least 1")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        return _fail("--timeout must be a positive number of seconds")
    if args.retries < 0:
        return _fail("--retries must be 0 or more")
    missing = [str(p) for p in args.images if not p.is_file()]
    if missing:
        return _fail(f"image not found or not a file: {', '.join(missing)}")
    try:
        args.admin_token = admin_token.token_from(args)
        _run(args, sys.stdout)
    except ClientError as exc:
        return _fail(str(exc))
    return 0


def _run(args: argparse.Namespace, out: TextIO) -> None:
    from clients.annotate import annotate_image
    from clients.contract import load_model_info
    from clients.images import image_bytes
    from clients.sync_client import DetectionClient

    names = _output_names(args.images) if args.annotate else {}
    info = load_model_info(args.model_config) if args.model_config else None
    with DetectionClient(
        args.url, protocol=args.protocol, model=info.name if info else args.model, timeout_s=args.timeout,
        retry=replace(DEFAULT_RETRY, attempts=args.retries + 1), admin_key=args.admin_token, model_info=info,
        ca_cert=args.ca_cert,
    ) as client:
        for start in range(0, len(args.images), args.batch):
            paths: list[Path] = args.images[start : start + args.batch]
            data = [image_bytes(p) for p in paths]
            for path, blob, result in zip(paths, data, client.detect_many(data), strict=True):
                out.write(format_json(path, result) if args.json else format_table(path, result))
                out.write("\n")
                if args.annotate:
                    annotate_image(blob, result, args.annotate / names[path])
                out.flush()
        if not client.model_info.class_names:
            print("note: class names unknown (the server restricts its model config): "
                  "pass --admin-token or --model-config; classes print as class_<id>", file=sys.stderr)




def format_json(path: Path, result: DetectionResult) -> str:
    """One line of JSON for one image."""
    top = {"top": [c.as_dict() for c in result.top]} if result.top else {}
    return json.dumps({"image": str(path), "detections": [d.as_dict() for d in result], **top})


def format_table(path: Path, result: DetectionResult) -> str:
    """A short human-readable block for one image."""
    if result.top:
        width = max(5, *(len(c.class_name) for c in result.top))
        return "\n".join([f"{path}: top {len(result.top)} classes", f"  {'class':<{width}}  score",
                          *(f"  {c.class_name:<{width}}  {c.score:5.3f}" for c in result.top)])
    count = len(result)
    lines = [f"{path}: {count} detection{'' if count == 1 else 's'}"]
    if count:
        width = max(5, *(len(d.class_name) for d in result))
        lines.append(f"  {'class':<{width}}  score      x1      y1      x2      y2")
        for d in result:
            x1, y1, x2, y2 = d.box
            lines.append(
                f"  {d.class_name:<{width}}  {d.score:5.3f}  {x1:6.1f}  {y1:6.1f}  {x2:6.1f}  {y2:6.1f}"
            )
    return "\n".join(lines)


def _output_names(paths: Sequence[Path]) -> dict[Path, str]:
    """File names in OUTDIR, unique even when two inputs share a name."""
    names: dict[Path, str] = {}
    used: set[str] = set()
    for path in paths:
        name, n = path.name, 1
        while name.lower() in used:
            name, n = f"{path.stem}-{n}{path.suffix}", n + 1
        used.add(name.lower())
        names[path] = name
    return names


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
