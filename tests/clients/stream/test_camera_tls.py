"""An rtsps:// camera's certificate, checked before FFmpeg connects (clients/stream/camera_tls.py): against a real
TLS listener here, with certificates of a throwaway CA (deploy/local/credentials.py, openssl). The whole path, a
real RTSPS camera through the ensemble, is in tests/integration/test_streams.py."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.errors import ClientError
from clients.stream.camera_tls import CameraTls, CameraTrustError, check_camera_certificate
from clients.stream.cli import build_parser, settings_from
from clients.stream.decode import DecodeOptions, FatalSourceError, SourceError, check_camera
from clients.stream.sources import parse_source
from deploy.local.credentials import make_ca, make_server_certificate
from generator.server.ports import free_port


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA; a camera certificate it signed for 127.0.0.1; one it signed for another host."""
    root = tmp_path_factory.mktemp("pki")
    ca = make_ca(root / "ca")
    make_server_certificate(ca, root / "camera", ("127.0.0.1",), os.getuid())
    make_server_certificate(ca, root / "other", ("camera-7.example",), os.getuid())
    return {"ca": ca[0], "camera": root / "camera", "other": root / "other"}


def _serve_tls(folder: Path) -> Iterator[int]:
    """A TLS listener on 127.0.0.1 presenting ``folder``'s certificate; completes each handshake, then closes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass  # the client refused the certificate: its side of the test

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture()
def camera(pki: dict[str, Path]) -> Iterator[int]:
    yield from _serve_tls(pki["camera"])


@pytest.fixture()
def impostor(pki: dict[str, Path]) -> Iterator[int]:
    yield from _serve_tls(pki["other"])


def test_a_camera_signed_by_the_given_ca_is_trusted(pki: dict[str, Path], camera: int) -> None:
    check_camera_certificate(f"rtsps://127.0.0.1:{camera}/cam", CameraTls(pki["ca"]), timeout_s=5)


def test_a_private_ca_is_not_trusted_by_the_system_and_the_error_says_what_to_pass(camera: int) -> None:
    with pytest.raises(CameraTrustError, match=r"not trusted \(unable to get local issuer certificate; checked "
                                               r"against the system's CAs .*pass --rtsps-ca .* or --rtsps-insecure"):
        check_camera_certificate(f"rtsps://127.0.0.1:{camera}/cam", CameraTls(), timeout_s=5)


def test_a_certificate_for_another_host_is_refused_even_from_the_trusted_ca(pki: dict[str, Path],
                                                                            impostor: int) -> None:
    with pytest.raises(CameraTrustError, match=r"IP address mismatch.*the host 127\.0\.0\.1\): the certificate does "
                                               r"not name 127\.0\.0\.1: use a host name or address it names"):
        check_camera_certificate(f"rtsps://127.0.0.1:{impostor}/cam", CameraTls(pki["ca"]), timeout_s=5)


def test_untrusted_is_fatal_and_unreachable_is_retried_and_insecure_checks_nothing(pki: dict[str, Path],
                                                                                 impostor: int) -> None:
    trusted = DecodeOptions(camera_tls=CameraTls(pki["ca"]), open_timeout_s=5)
    with pytest.raises(FatalSourceError, match=r"cannot open rtsps://127\.0\.0\.1:\d+/cam: the camera's certificate is "
                                               "not trusted"):
        check_camera(parse_source(f"gate=rtsps://127.0.0.1:{impostor}/cam"), trusted)
    with pytest.raises(SourceError, match=r"cannot open rtsps://127\.0\.0\.1:\d+/cam: Connection refused") as refused:
        check_camera(parse_source(f"gate=rtsps://127.0.0.1:{free_port()}/cam"), trusted)
    assert not isinstance(refused.value, FatalSourceError)  # a camera that does not answer yet is reopened
    check_camera(parse_source(f"gate=rtsps://127.0.0.1:{impostor}/cam"),
                  DecodeOptions(camera_tls=CameraTls(verify=False)))


@pytest.mark.parametrize(("flags", "message"), [
    (["--rtsps-ca", "missing.pem"], "--rtsps-ca missing.pem: no such file"),
    (["--rtsps-ca", "{ca}", "--rtsps-insecure"], "contradicts --rtsps-insecure"),
])
def test_contradicting_or_missing_camera_trust_flags_are_refused(pki: dict[str, Path], flags: list[str],
                                                                 message: str) -> None:
    args = build_parser().parse_args(["rtsps://127.0.0.1/cam", *(f.format(ca=pki["ca"]) for f in flags)])
    with pytest.raises(ClientError, match=message):
        settings_from(args)


def test_the_cli_passes_the_cameras_ca_to_the_decoder(pki: dict[str, Path]) -> None:
    args = build_parser().parse_args(["rtsps://127.0.0.1/cam", "--rtsps-ca", str(pki["ca"])])
    assert settings_from(args).decode.camera_tls == CameraTls(pki["ca"], verify=True)
    assert settings_from(build_parser().parse_args(["x.mp4"])).decode.camera_tls == CameraTls(None, verify=True)
