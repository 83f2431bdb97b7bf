"""A real RTSP server for the stream tests: GStreamer's gst-rtsp-server, one mount per video file.

Run with Debian's Python (``/usr/bin/python3``), which has the GObject bindings of Debian's
``gir1.2-gst-rtsp-server-1.0``, ``python3-gi`` and the GStreamer plugins (``.ci/run`` installs them); the
project's virtual environment need not be Debian's Python. Standard library and ``gi`` only.

    /usr/bin/python3 rtsp_server.py --port 0 --mount cam0=video.mp4 [--mount broken=garbage.mp4 ...]

Prints ``READY <port>`` once it listens on 127.0.0.1. Each client gets its own pipeline (not shared), so every
session plays the file from its first frame, paced at the file's frame rate as a camera delivers it. A mount whose
file does not demux makes the server refuse the session, as a camera with a broken encoder does.
"""

from __future__ import annotations

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402  (after require_version, as gi wants)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mount", action="append", default=[], metavar="NAME=MP4")
    args = parser.parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    mounts = server.get_mount_points()
    for item in args.mount:
        name, _, path = item.partition("=")
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(f'( filesrc location="{path}" ! qtdemux ! rtph264pay name=pay0 pt=96 '
                           "config-interval=-1 )")
        factory.set_shared(False)
        mounts.add_factory(f"/{name}", factory)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{args.port}", file=sys.stderr)
        return 1
    loop = GLib.MainLoop()
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    print(f"READY {server.get_bound_port()}", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
