"""A throwaway CA, the proxy's certificate and the stack's secrets, for a stack on one machine.

``python -m deploy up --local`` makes them when none are given, under ``deploy/.local/<project>/`` (git-ignored
and docker-ignored, so they reach neither a commit nor an image), and reuses them while they are there: ``down``
removes them with the stack. The certificate names the hosts clients dial: ``localhost`` and ``127.0.0.1`` (the
published ports) and ``triton`` (the in-network name the Locust containers dial). Made with the ``openssl``
command line, EC P-256, valid for 30 days.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from deploy.errors import LocalStackError

logger = logging.getLogger(__name__)

DEFAULT_NAMES = ("localhost", "127.0.0.1", "::1", "triton")
VALID_DAYS = 30
CA_SUBJECT = "/CN=triton-detection-ensemble local CA"


@dataclass(frozen=True)
class Credentials:
    """Where the stack's TLS files and secrets are: ``tls_dir`` holds tls.crt, tls.key and ca.crt."""

    tls_dir: Path
    admin_token_file: Path
    grafana_password_file: Path

    @property
    def ca_cert(self) -> Path:
        return self.tls_dir / "ca.crt"

    @property
    def admin_token(self) -> str:
        return self.admin_token_file.read_text(encoding="utf-8").strip()

    @property
    def grafana_password(self) -> str:
        return self.grafana_password_file.read_text(encoding="utf-8").strip()


def _openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        raise LocalStackError("no openssl command to make the throwaway CA: install openssl, or pass --tls-dir")
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalStackError(f"openssl {args[0]} failed: {result.stderr.strip()[-400:]}")


def _subject_alt_names(names: tuple[str, ...]) -> str:
    import ipaddress

    def entry(name: str) -> str:
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return f"DNS:{name}"
        return f"IP:{name}"

    return ",".join(entry(name) for name in names)


def make_ca(directory: Path) -> tuple[Path, Path]:
    """A self-signed CA (certificate, key) that signs only the proxy's certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    cert, key = directory / "ca.crt", directory / "ca.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-days", str(VALID_DAYS), "-subj", CA_SUBJECT, "-keyout", str(key), "-out", str(cert),
             "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    key.chmod(0o600)
    return cert, key


def make_server_certificate(ca: tuple[Path, Path], tls_dir: Path, names: tuple[str, ...], owner: int) -> None:
    """tls.crt (signed by the CA, naming ``names``), tls.key readable by ``owner`` (the proxy's uid), ca.crt."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    tls_dir.chmod(0o755)  # the proxy (another uid) enters it through a read-only bind mount
    key, csr, cert = tls_dir / "tls.key", tls_dir / "tls.csr", tls_dir / "tls.crt"
    extensions = tls_dir / "tls.ext"
    extensions.write_text(
        f"subjectAltName={_subject_alt_names(names)}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    try:
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", f"/CN={names[0]}", "-keyout", str(key), "-out", str(csr))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
                 "-days", str(VALID_DAYS), "-extfile", str(extensions), "-out", str(cert))
    finally:
        csr.unlink(missing_ok=True)
        extensions.unlink(missing_ok=True)
    shutil.copyfile(ca[0], tls_dir / "ca.crt")
    _readable_by(key, owner)
    for public in (cert, tls_dir / "ca.crt"):
        public.chmod(0o644)


def _readable_by(key: Path, uid: int) -> None:
    """The key readable by ``uid`` only: chown where we may (root), else by everyone on this machine (warned)."""
    if os.geteuid() == 0:
        os.chown(key, uid, uid)
    elif os.geteuid() != uid:
        key.chmod(0o644)
        logger.warning("%s is readable by every user of this machine: the proxy runs as uid %d and only root can "
                       "hand the file to it (a throwaway key; pass --tls-dir for your own)", key, uid)
        return
    key.chmod(0o600)


def _secret_file(path: Path) -> Path:
    if not path.is_file():
        path.write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def ensure_credentials(state: Path, *, owner: int, names: tuple[str, ...] = DEFAULT_NAMES,
                       tls_dir: Path | None = None) -> Credentials:
    """The stack's TLS files and secrets under ``state``: reused when present, made when not.

    ``tls_dir`` (yours: tls.crt, tls.key, ca.crt) replaces the throwaway CA and certificate.
    """
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o700)  # the daemon (root) mounts tls/ from here; nothing else needs to enter
    if tls_dir is not None:
        missing = [name for name in ("tls.crt", "tls.key", "ca.crt") if not (tls_dir / name).is_file()]
        if missing:
            raise LocalStackError(f"--tls-dir {tls_dir} lacks {', '.join(missing)} (the proxy's certificate and key, "
                                  "and the CA clients trust)")
        directory = tls_dir.resolve()
    else:
        directory = state / "tls"
        if not all((directory / name).is_file() for name in ("tls.crt", "tls.key", "ca.crt")):
            logger.info("making a throwaway CA and a certificate for %s in %s", ", ".join(names), directory)
            make_server_certificate(make_ca(state / "ca"), directory, names, owner)
    token = _secret_file(state / "admin-token")
    _readable_by(token, owner)  # the rollout's container (uid owner) reads it as a compose secret
    return Credentials(directory, token, _secret_file(state / "grafana-password"))
