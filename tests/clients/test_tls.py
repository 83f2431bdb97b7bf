"""Trusting a deployment's own CA (clients/tls.py), and naming why a connection never carried a request."""

import ssl
import subprocess

import pytest
from tritonclient.utils import InferenceServerException

from clients import TlsError, connection_failure
from clients._errors_map import translate_error
from clients.endpoint import parse_endpoint
from clients.errors import ClientError, ServerUnavailableError
from clients.tls import ca_options


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "1", "-subj", "/CN=test CA", "-keyout", str(folder / "ca.key"), "-out",
                    str(folder / "ca.crt")], check=True, capture_output=True)
    return folder / "ca.crt"


def test_each_client_flavour_gets_the_ca_its_way(ca):
    assert ca_options(parse_endpoint("grpcs://h:1"), ca) == {"root_certificates": str(ca)}
    assert ca_options(parse_endpoint("https://h:1"), ca) == {"ssl_options": {"ca_certs": str(ca)}}
    context = ca_options(parse_endpoint("https://h:1"), ca, aio=True)["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert ca_options(parse_endpoint("grpcs://h:1"), None) == {}


def test_a_ca_for_a_plain_url_or_a_missing_file_is_a_clear_error(ca, tmp_path):
    with pytest.raises(ClientError, match="use grpcs:// or https://"):
        ca_options(parse_endpoint("grpc://h:1"), ca)
    with pytest.raises(ClientError, match="CA certificate not found"):
        ca_options(parse_endpoint("https://h:1"), tmp_path / "nope.crt")
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate")
    with pytest.raises(ClientError, match="cannot read the CA certificate"):
        ca_options(parse_endpoint("https://h:1"), garbage, aio=True)


# As gRPC 1.7x (BoringSSL) and Python's ssl word them, measured against the deployment's proxy.
@pytest.mark.parametrize(("text", "kind", "cause"), [
    ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8444: Tls handshake failed "
     "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
     "tls", "not signed by a CA this client trusts"),
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate",
     "tls", "not signed by a CA this client trusts"),
    ("ipv4:172.18.0.3:8444: Custom verification check failed with error: UNAUTHENTICATED: Hostname Verification "
     "Check failed.", "tls", "does not name pod"),
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: Hostname mismatch, certificate is not valid for "
     "'pod'. (_ssl.c:1006)", "tls", "does not name pod"),
    ("INTERNAL: ipv4:127.0.0.1:8444: Failed parsing HTTP/2 (Expected SETTINGS frame as the first frame, got frame "
     "type 80) (Trying to connect an http1.x server (HTTP status 400))", "tls", "speaks TLS"),
    ("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)", "tls", "does not speak TLS"),
    ("UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused", "refused",
     "nothing listens at pod:8444"),
    ("DNS resolution failed for nowhere:8444: C-ares status is not ARES_SUCCESS", "dns", "cannot resolve pod"),
])
def test_connection_failures_are_named(text, kind, cause):
    found = connection_failure(text, "pod:8444")
    assert found is not None and found[0] == kind and cause in found[1]


def test_an_answer_from_the_server_is_no_connection_failure():
    assert connection_failure("[StatusCode.UNAVAILABLE] Exceeds maximum queue size", "h:1") is None
    assert connection_failure("invalid image: truncated JPEG", "h:1") is None


def test_tls_failures_are_never_retried_and_refusals_are():
    endpoint = parse_endpoint("grpcs://h:1")
    untrusted = InferenceServerException("failed to connect ... CERTIFICATE_VERIFY_FAILED", "StatusCode.UNAVAILABLE")
    error = translate_error(untrusted, endpoint, 2.0)
    assert type(error) is TlsError and not isinstance(error, ServerUnavailableError)
    assert str(error).startswith("cannot talk to grpcs://h:1: TLS:")
    https = translate_error(ssl.SSLCertVerificationError("certificate verify failed: unable to get local issuer"),
                            parse_endpoint("https://h:1"), 2.0)
    assert type(https) is TlsError
    refused = InferenceServerException("Failed to connect to remote host: Connection refused", "StatusCode.UNAVAILABLE")
    assert type(translate_error(refused, endpoint, 2.0)) is ServerUnavailableError
