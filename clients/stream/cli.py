"""``python -m clients.stream SOURCE...``: video files, RTSP/RTSPS URLs and cameras through the ensemble."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from clients import admin_token
from clients.endpoint import tls_options
from clients.errors import ClientError
from clients.stream.camera_tls import CameraTls, is_rtsps
from clients.stream.decode import DecodeOptions
from clients.stream.reader import ReaderSettings
from clients.stream.runner import Sink, StreamSettings, run_streams
from clients.stream.sources import SourceSpec, parse_sources
from clients.sync_client import DEFAULT_URL

logger = logging.getLogger("clients.stream")
EXIT_STREAM_FAILED = 2


def _positive(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clients.stream",
        description="Send video frames (files, RTSP/RTSPS and other network streams, cameras) through the Triton "
                    "detection ensemble: one JSON line per answered frame on stdout, a per-stream summary on stderr. "
                    "When the server falls behind, the newest frame wins and the others are dropped and counted.",
    )
    parser.add_argument("sources", nargs="+", metavar="SOURCE",
                        help="[NAME=]a video file, rtsp:// or rtsps:// URL (or http, rtmp, srt, udp), /dev/videoN or "
                             "a camera index")
    server = parser.add_argument_group("server")
    server.add_argument("--url", default=DEFAULT_URL, help="host:port (gRPC) or grpc[s]:// / http[s]:// URL")
    server.add_argument("--protocol", choices=("grpc", "http"), help="protocol when the URL has no scheme")
    server.add_argument("--model", default="yolo", help="ensemble name (default: %(default)s)")
    server.add_argument("--timeout", type=_positive, default=5.0, metavar="S",
                        help="per-frame deadline; a later answer is counted as failed (default: %(default)s)")
    server.add_argument("--ca-cert", type=Path, metavar="PEM", help="CA certificate for grpcs:// and https:// URLs")
    admin_token.add_arguments(server, "for the class names in the restricted model config", file=False)
    server.add_argument("--model-config", type=Path, metavar="PATH",
                        help="the ensemble's config.pbtxt (or its folder): class names without the key")
    flow = parser.add_argument_group("frames")
    flow.add_argument("--fps", type=_positive, metavar="F", help="keep at most F frames a second per stream")
    flow.add_argument("--in-flight", type=_count, default=1, metavar="N", help="requests open per stream (default: 1)")
    flow.add_argument("--queue", type=_count, default=1, metavar="N",
                      help="frames waiting per stream; a newer frame pushes the oldest out (default: 1)")
    flow.add_argument("--jpeg-quality", type=int, default=90, metavar="Q", help="JPEG quality 1-100 (default: 90)")
    flow.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds (default: until the "
                      "sources end, or Ctrl-C)")
    flow.add_argument("--max-frames", type=_count, metavar="N", help="stop each stream after N frames")
    flow.add_argument("--loop", action="store_true", help="play video files again when they end")
    source = parser.add_argument_group("sources")
    source.add_argument("--rtsp-transport", choices=("tcp", "udp"), default="tcp")
    source.add_argument("--open-timeout", type=_positive, default=10.0, metavar="S")
    source.add_argument("--read-timeout", type=_positive, default=5.0, metavar="S",
                        help="a source silent this long is reopened (default: %(default)s)")
    source.add_argument("--reconnect-max", type=_positive, default=10.0, metavar="S",
                        help="longest pause between reopenings (from 0.5 s, doubling; default: %(default)s)")
    source.add_argument("--max-reconnects", type=int, metavar="N", help="give a source up after N reopenings "
                        "(default: never)")
    source.add_argument("--rtsps-ca", type=Path, metavar="PEM",
                        help="CA certificate(s) that signed the cameras' rtsps:// certificates (default: the system's)")
    source.add_argument("--rtsps-insecure", action="store_true",
                        help="accept any rtsps:// certificate (encrypted, not authenticated: FFmpeg verifies none)")
    source.add_argument("--hwaccel", metavar="DEVICE", help="decode on a hardware device FFmpeg knows (cuda, vaapi, "
                        "qsv, ...); an error, not a silent CPU fallback, when it is not there")
    out = parser.add_argument_group("output")
    out.add_argument("--quiet", action="store_true", help="no JSON lines, only the summary")
    out.add_argument("--annotate", type=Path, metavar="OUTDIR", help="write OUTDIR/<stream>.mp4 with boxes drawn")
    out.add_argument("--summary-json", type=Path, metavar="PATH", help="also write the summary as JSON")
    out.add_argument("--metrics-port", type=int, metavar="P",
                     help="serve the per-stream numbers as Prometheus metrics on this port (0: any free port)")
    out.add_argument("--metrics-host", default="127.0.0.1", help="interface for --metrics-port (default: %(default)s)")
    return parser


def settings_from(args: argparse.Namespace) -> StreamSettings:
    from clients.contract import load_model_info

    if not 1 <= args.jpeg_quality <= 100:
        raise ClientError("--jpeg-quality must be 1..100")
    if args.max_reconnects is not None and args.max_reconnects < 0:
        raise ClientError("--max-reconnects must be 0 or more")
    if args.rtsps_ca is not None and (args.rtsps_insecure or not args.rtsps_ca.is_file()):
        raise ClientError(f"--rtsps-ca {args.rtsps_ca}: " + ("contradicts --rtsps-insecure" if args.rtsps_insecure
                                                              else "no such file"))
    info = load_model_info(args.model_config) if args.model_config else None
    return StreamSettings(
        url=args.url, protocol=args.protocol, model=info.name if info else args.model, timeout_s=args.timeout,
        in_flight=args.in_flight, queue=args.queue, jpeg_quality=args.jpeg_quality, duration_s=args.duration,
        admin_key=admin_token.token_from(args), model_info=info, client_options=tls_options(args.url, args.protocol, args.ca_cert),
        reader=ReaderSettings(fps=args.fps, loop=args.loop, max_frames=args.max_frames,
                              reconnect_max_s=args.reconnect_max, max_reconnects=args.max_reconnects),
        decode=DecodeOptions(rtsp_transport=args.rtsp_transport, open_timeout_s=args.open_timeout,
                             read_timeout_s=args.read_timeout, hwaccel=args.hwaccel,
                             camera_tls=CameraTls(args.rtsps_ca, verify=not args.rtsps_insecure)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        specs = parse_sources(args.sources)
        settings = settings_from(args)
        for spec in specs:
            if args.rtsps_insecure and is_rtsps(spec.location):
                logger.warning("stream %s: its rtsps:// certificate is not verified (--rtsps-insecure): the stream "
                               "is encrypted, not authenticated", spec.name)
        summaries = asyncio.run(_run(specs, settings, args))
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for line in _summary_lines(summaries):
        print(line, file=sys.stderr)
    if args.summary_json:
        args.summary_json.write_text(json.dumps({"streams": summaries}, indent=2))
    failed = [s["stream"] for s in summaries if s["status"] == "failed" or not s["answered"]]
    return EXIT_STREAM_FAILED if failed else 0


def _summary_lines(summaries: list[dict[str, Any]]) -> list[str]:
    from clients.stream.output import summary_table

    return summary_table(summaries)


async def _run(specs: list[SourceSpec], settings: StreamSettings, args: argparse.Namespace) -> list[dict[str, Any]]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on every platform / thread
            loop.add_signal_handler(sig, stop.set)
    with _sinks(args) as (sinks, on_start):
        return await run_streams(specs, settings, sinks, stop=stop, on_start=on_start)


@contextlib.contextmanager
def _sinks(args: argparse.Namespace) -> Iterator[tuple[list[Sink], Any]]:
    from clients.stream.output import JsonLines

    sinks: list[Sink] = [] if args.quiet else [JsonLines(sys.stdout)]
    videos = None
    if args.annotate:
        from clients.stream.video_out import AnnotatedVideos

        videos = AnnotatedVideos(args.annotate, args.fps or 10.0)
        sinks.append(videos)

    def on_start(stats: list[Any]) -> None:
        if args.metrics_port is not None:
            from clients.stream.metrics import serve_metrics

            port = serve_metrics(lambda: stats, args.metrics_port, args.metrics_host)
            logger.info("metrics on http://%s:%d/metrics", args.metrics_host, port)

    try:
        yield sinks, on_start
    finally:
        if videos is not None:
            videos.close()
