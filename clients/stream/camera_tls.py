"""The camera's certificate behind an ``rtsps://`` URL, checked before FFmpeg connects.

FFmpeg's RTSP demuxer opens its TLS connection with no options (libavformat/rtsp.c, ``ff_rtsp_connect``), so it
never verifies the camera's certificate: a self-signed certificate naming another host is accepted, and the
stream is encrypted but not authenticated (shown against gst-rtsp-server in tests/integration/test_streams.py).
Each (re)open therefore first makes its own TLS handshake to the camera with Python's ``ssl``, verifying the
chain against the system's CAs or ``--rtsps-ca`` and the host name against the URL, and refuses the camera by
name when it fails. This checks the certificate the camera presents, not FFmpeg's own connection a moment
later; ``--rtsps-insecure`` skips it, saying so once per source.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

RTSPS_DEFAULT_PORT = 322  # RFC 7826's rtsps port, FFmpeg's default for the scheme
NAME_MISMATCH = (62, 64)  # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


class CameraTrustError(Exception):
    """The camera's certificate is not trusted (chain, host name, expiry); reopening will not change that."""


@dataclass(frozen=True)
class CameraTls:
    ca_file: Path | None = None  # None: the system's CAs
    verify: bool = True


def is_rtsps(location: str) -> bool:
    return location.lower().startswith("rtsps://")


def _context(tls: CameraTls) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _refusal(exc: ssl.SSLCertVerificationError, tls: CameraTls, host: str) -> str:
    where = f"the CAs in {tls.ca_file}" if tls.ca_file else "the system's CAs"
    reason = str(exc.verify_message).rstrip(".")
    if exc.verify_code in NAME_MISMATCH:
        hint = f"the certificate does not name {host}: use a host name or address it names"
    else:
        hint = "pass --rtsps-ca with the CA that signed it"
    return (f"the camera's certificate is not trusted ({reason}; checked against {where} and the host {host}): "
            f"{hint}, or --rtsps-insecure to accept any certificate")


def check_camera_certificate(location: str, tls: CameraTls, timeout_s: float) -> None:
    """Handshake with the camera at ``location`` and verify its certificate (module docstring).

    Raises ``CameraTrustError`` when the certificate is refused and ``OSError`` when the camera does not answer
    (the caller retries that one, as an unreachable camera).
    """
    parts = urlsplit(location)
    host, port = parts.hostname, parts.port or RTSPS_DEFAULT_PORT
    if not host:
        raise CameraTrustError(f"{location!r} names no host")
    context = _context(tls)
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=host):
                return
        except ssl.SSLCertVerificationError as exc:
            raise CameraTrustError(_refusal(exc, tls, host)) from None
        except ssl.SSLError as exc:
            raise CameraTrustError(f"no TLS session with the camera at {host}:{port}: {exc.reason or exc}") from None
