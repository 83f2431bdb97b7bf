"""A real RTSP server for the stream tests: GStreamer's gst-rtsp-server, one mount per video file.

Run with Debian's Python (``/usr/bin/python3``), which has the GObject bindings of Debian's
``gir1.2-gst-rtsp-server-1.0``, ``python3-gi`` and the GStreamer plugins (``.ci/run`` installs them); the
project's virtual environment need not be Debian's Python. Standard library and ``gi`` only.

    /usr/bin/python3 rtsp_server.py --port 0 --mount cam0=video.mp4 [--mount broken=garbage.mp4 ...]
        [--tls-cert cert.pem --tls-key key.pem]

Prints ``READY <port>`` once it listens on 127.0.0.1. Each client gets its own pipeline (not shared), so every
session plays the file from its first frame, paced at the file's frame rate as a camera delivers it. A mount whose
file does not demux makes the server refuse the session, as a camera with a broken encoder does. With a certificate
it speaks RTSP over TLS only (``rtsps://``, Debian's ``glib-networking`` provides GIO's TLS), to anyone.
"""

from __future__ import annotations

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gio, GLib, Gst, GstRtspServer  # noqa: E402  (after require_version, as gi wants)

ROLE = "anyone"


def _tls(server: GstRtspServer.RTSPServer, cert: str, key: str) -> GstRtspServer.RTSPPermissions:
    """TLS on every connection, no user names; the permissions every mount needs once an auth is set."""
    auth = GstRtspServer.RTSPAuth()
    auth.set_tls_certificate(Gio.TlsCertificate.new_from_files(cert, key))
    token = GstRtspServer.RTSPToken()
    token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, ROLE)
    auth.set_default_token(token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    for permission in (GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT):
        permissions.add_permission_for_role(ROLE, permission, True)
    return permissions


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mount", action="append", default=[], metavar="NAME=MP4")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    permissions = _tls(server, args.tls_cert, args.tls_key) if args.tls_cert else None
    mounts = server.get_mount_points()
    for item in args.mount:
        name, _, path = item.partition("=")
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(f'( filesrc location="{path}" ! qtdemux ! rtph264pay name=pay0 pt=96 '
                           "config-interval=-1 )")
        factory.set_shared(False)
        if permissions is not None:
            factory.set_permissions(permissions)
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
