"""Certificates made at test time (``cryptography``): a CA, the broker's certificate
(for ``localhost`` and ``127.0.0.1``) and client certificates, as PEM files.

``pki`` (session scope) gives a :class:`Pki`::

    pki.ca                      # CA certificate file (the clients' and brokers' trust store)
    pki.server_cert, pki.server_key
    pki.client("alice")         # (cert, key) files of a client certificate, CN=alice,OU=eng,O=Strata
    pki.server("next")          # (cert, key) of another broker certificate, e.g. for a rotation
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import ssl
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Pki", "client_records", "listener_handshake", "memory_handshake", "pki"]


class Pki:
    def __init__(self, root: Path, ca_name: str = "Strata test CA") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._oid = x509, hashes, ec, NameOID
        self.root = root
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
        ca = self._builder(self._ca_name, self._ca_key.public_key()).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        ).sign(self._ca_key, hashes.SHA256())
        self.ca = self._write("ca.pem", ca)
        self.server_cert, self.server_key = self._issue(
            "server", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        )
        self.keystore = root / "server-keystore.pem"  # key and chain in one file (ssl.keystore.location)
        self.keystore.write_text(self.server_key.read_text() + self.server_cert.read_text())

    def client(self, name: str, unit: str = "eng") -> tuple[Path, Path]:
        x509, oid = self._x509, self._oid
        subject = x509.Name([
            x509.NameAttribute(oid.COUNTRY_NAME, "NL"),
            x509.NameAttribute(oid.ORGANIZATION_NAME, "Strata"),
            x509.NameAttribute(oid.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(oid.COMMON_NAME, name),
        ])
        return self._issue(f"client-{name}", subject, [x509.DNSName(name)])

    def server(self, stem: str, common_name: str = "localhost", names: tuple[str, ...] = ("localhost", "127.0.0.1"),
               valid: tuple[float, float] = (-1.0, 48.0)) -> tuple[Path, Path]:
        """(cert, key) files of another broker certificate: ``names`` as its subject
        alternative names (DNS names, or IP addresses), valid from ``valid[0]`` to
        ``valid[1]`` hours from now."""
        x509, oid = self._x509, self._oid

        def alt(name: str):  # type: ignore[no-untyped-def]
            try:
                return x509.IPAddress(ipaddress.ip_address(name))
            except ValueError:
                return x509.DNSName(name)

        return self._issue(stem, x509.Name([x509.NameAttribute(oid.COMMON_NAME, common_name)]),
                           [alt(n) for n in names], valid)

    def _builder(self, subject, public_key, valid=(-1.0, 48.0)):  # type: ignore[no-untyped-def]
        now = datetime.datetime.now(datetime.UTC)
        return (self._x509.CertificateBuilder().subject_name(subject).issuer_name(self._ca_name)
                .public_key(public_key).serial_number(self._x509.random_serial_number())
                .not_valid_before(now + datetime.timedelta(hours=valid[0]))
                .not_valid_after(now + datetime.timedelta(hours=valid[1])))

    def _issue(self, stem: str, subject, names, valid=(-1.0, 48.0)) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
        from cryptography.hazmat.primitives import serialization

        key = self._ec.generate_private_key(self._ec.SECP256R1())
        cert = self._builder(subject, key.public_key(), valid).add_extension(
            self._x509.SubjectAlternativeName(names), critical=False
        ).sign(self._ca_key, self._hashes.SHA256())
        key_path = self.root / f"{stem}-key.pem"
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return self._write(f"{stem}.pem", cert), key_path

    def _write(self, name: str, cert) -> Path:  # type: ignore[no-untyped-def]
        from cryptography.hazmat.primitives import serialization

        path = self.root / name
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pki]:
    pytest.importorskip("cryptography", reason="certificates are made with cryptography")
    yield Pki(tmp_path_factory.mktemp("pki"))


def memory_handshake(server: ssl.SSLContext, client: ssl.SSLContext,
                     server_hostname: str | None = "localhost",
                     session: ssl.SSLSession | None = None) -> ssl.SSLObject:
    """A real TLS handshake between two contexts, over memory BIOs, and one record from
    the client (TLS 1.3 servers check a client certificate only then): the client's
    :class:`ssl.SSLObject` (``cipher()``, ``getpeercert()``); ``ssl.SSLError`` if refused.
    ``server_hostname=None`` sends no SNI (the client must not check the host name);
    ``session``: one to resume. The client has read the server's session tickets, if any."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=server_hostname, session=session)
    done = {"srv": False, "cli": False}
    for _ in range(20):
        for name, side in (("cli", cli), ("srv", srv)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            cli.write(b"ping")
            s_in.write(c_out.read())
            assert srv.read(4) == b"ping"
            c_in.write(s_out.read())
            with contextlib.suppress(ssl.SSLWantReadError):
                cli.read(1)  # takes in the session tickets
            return cli
    raise AssertionError("the handshake did not finish")


def listener_handshake(server: Any, client: ssl.SSLContext, server_hostname: str | None = "localhost",
                       session: ssl.SSLSession | None = None) -> tuple[ssl.SSLObject, Any]:
    """:func:`memory_handshake` against a Kafka listener's context (``OpenSSL.SSL.Context``,
    service.security.tls_engine): the client's :class:`ssl.SSLObject` and the listener's
    ``OpenSSL.SSL.Connection`` (its peer certificate); ``ssl.SSLError`` or
    ``OpenSSL.SSL.Error`` if refused."""
    from OpenSSL import SSL

    srv = SSL.Connection(server, None)
    srv.set_accept_state()
    c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(c_in, c_out, server_hostname=server_hostname, session=session)
    _CLIENT_OUT[cli] = c_out
    done = {"srv": False, "cli": False}

    def pump() -> None:
        if data := c_out.read():
            srv.bio_write(data)
        with contextlib.suppress(SSL.WantReadError):
            while True:
                c_in.write(srv.bio_read(1 << 16))

    steps = (("cli", cli.do_handshake, ssl.SSLWantReadError), ("srv", srv.do_handshake, SSL.WantReadError))
    for _ in range(20):
        for name, step, wants_more in steps:
            if not done[name]:
                with contextlib.suppress(wants_more):
                    step()
                    done[name] = True
            pump()
        if all(done.values()):
            cli.write(b"ping")
            pump()
            assert srv.recv(4) == b"ping"
            pump()
            with contextlib.suppress(ssl.SSLWantReadError):
                cli.read(1)  # takes in the session tickets
            return cli, srv
    raise AssertionError("the handshake did not finish")


_CLIENT_OUT: weakref.WeakKeyDictionary[ssl.SSLObject, ssl.MemoryBIO] = weakref.WeakKeyDictionary()


def client_records(client: ssl.SSLObject, plaintext: bytes) -> bytes:
    """The TLS records a client of :func:`listener_handshake` makes of ``plaintext``."""
    client.write(plaintext)
    return _CLIENT_OUT[client].read()
