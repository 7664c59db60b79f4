"""The Kafka listeners' TLS library (service.security.tls_engine): its context holds what
the ``ssl`` module's would (keystores, truststores, client certificates, no resumption),
checked by real handshakes over memory BIOs against ``ssl`` module clients."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
from OpenSSL import SSL

from service.security.tls import TlsSettings, rfc2253_subject, server_context
from service.security.tls_engine import (
    check_bindings,
    listener_context,
    openssl_version,
    peer_certificate,
)
from tests.security_fixtures import Pki, client_records, listener_handshake, memory_handshake


def _settings(pki: Pki, **changes: Any) -> TlsSettings:
    fields: dict[str, Any] = {
        "keystore_location": str(pki.keystore), "certificate_chain": None, "private_key": None, "key_password": None,
        "truststore_location": str(pki.ca), "truststore_certificates": None, "client_auth": "none",
        "enabled_protocols": ("TLSv1.2", "TLSv1.3"), "cipher_suites": (), "endpoint_identification": False}
    fields.update(changes)
    return TlsSettings(**fields)


def _client(pki: Pki, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def _served(context: SSL.Context, client: ssl.SSLContext) -> bytes:
    der = listener_handshake(context, client)[0].getpeercert(binary_form=True)
    assert der is not None
    return der


def test_the_bindings_the_record_loop_calls_are_there_and_the_openssl_is_the_wheels() -> None:
    check_bindings()
    assert openssl_version().startswith("OpenSSL ")


@pytest.mark.parametrize("form", ["one file", "two files", "inline"])
def test_each_keystore_form_serves_its_certificate(pki: Pki, form: str) -> None:
    changes: dict[str, Any] = {
        "one file": {},
        "two files": {"keystore_location": None, "certificate_location": str(pki.server_cert),
                          "key_location": str(pki.server_key)},
        "inline": {"keystore_location": None, "certificate_chain": pki.server_cert.read_text(),
                       "private_key": pki.server_key.read_text()},
    }[form]
    der = ssl.PEM_cert_to_DER_cert(pki.server_cert.read_text())
    assert _served(listener_context(_settings(pki, **changes)), _client(pki)) == der


def _encrypted_key(pki: Pki, tmp_path: Path, password: bytes) -> Path:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None)
    path = tmp_path / "encrypted-key.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(password)))
    return path


def test_an_encrypted_key_loads_with_its_password_only(pki: Pki, tmp_path: Path) -> None:
    key = _encrypted_key(pki, tmp_path, b"s3cret")
    base = {"keystore_location": None, "certificate_location": str(pki.server_cert), "key_location": str(key)}
    listener_context(_settings(pki, **base, key_password="s3cret"))
    for password in ("wrong", None):  # never a prompt on the terminal: a clear refusal
        with pytest.raises(ValueError, match=f"cannot load the TLS key and certificate from {pki.server_cert} "
                                             f"and {key}"):
            listener_context(_settings(pki, **base, key_password=password))


def test_a_password_for_a_key_that_has_none_is_ignored_as_the_ssl_module_does(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(pki, keystore_location=None, certificate_location=str(pki.server_cert),
                         key_location=str(pki.server_key), key_password="not-needed")
    server_context(settings)  # the ssl module's: no complaint
    with caplog.at_level("WARNING", logger="service.security.tls_engine"):
        context = listener_context(settings)
    assert "not encrypted" in caplog.text
    assert _served(context, _client(pki)) == ssl.PEM_cert_to_DER_cert(pki.server_cert.read_text())


def test_a_key_that_is_not_the_certificates_or_a_missing_file_is_refused(pki: Pki, tmp_path: Path) -> None:
    stray_key = pki.server("stray")[1]
    with pytest.raises(ValueError, match="cannot load the TLS key and certificate"):
        listener_context(_settings(pki, keystore_location=None, certificate_location=str(pki.server_cert),
                                   key_location=str(stray_key)))
    with pytest.raises(ValueError, match="No such file"):
        listener_context(_settings(pki, keystore_location=str(tmp_path / "absent.pem")))
    (tmp_path / "no-key.pem").write_bytes(pki.server_cert.read_bytes())
    with pytest.raises(ValueError, match="no PEM private key"):
        listener_context(_settings(pki, keystore_location=str(tmp_path / "no-key.pem")))
    with pytest.raises(ValueError, match="needs a key and certificate"):
        listener_context(_settings(pki, keystore_location=None))


def _stdlib_server_view(pki: Pki, client: ssl.SSLContext) -> dict[str, Any]:
    """What the ``ssl`` module's server (client certificates required) gets from getpeercert()."""
    server = server_context(_settings(pki, client_auth="required"))
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        for side in (cli, srv):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    cli.write(b"x")
    s_in.write(c_out.read())
    srv.read(1)
    return srv.getpeercert()


def test_a_client_certificate_is_seen_as_the_ssl_module_sees_it(pki: Pki, tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID, ObjectIdentifier

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "org")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COUNTRY_NAME, "NL")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Strata, B.V.")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                                        x509.NameAttribute(NameOID.USER_ID, "u-17")]),  # multi-valued
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.EMAIL_ADDRESS, "ops@example.com")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(ObjectIdentifier("1.3.6.1.4.1.99999.1"), "custom")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "Ünïcode #1")]),
    ])
    ca_key = pki._ca_key  # the test CA signs it
    cert = (pki._builder(subject, key.public_key()).sign(ca_key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "rich.pem", tmp_path / "rich-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    client = _client(pki, (cert_path, key_path))
    _, conn = listener_handshake(listener_context(_settings(pki, client_auth="required")), client)
    ours = peer_certificate(conn)
    theirs = _stdlib_server_view(pki, client)
    assert ours is not None
    assert ours["subject"] == theirs["subject"] and ours["issuer"] == theirs["issuer"]
    assert rfc2253_subject(ours) == rfc2253_subject(theirs)
    assert rfc2253_subject(ours).startswith("CN=Ünïcode #1,1.3.6.1.4.1.99999.1=custom,emailAddress=")


def test_a_requested_certificate_may_be_absent_and_none_is_asked_for_otherwise(pki: Pki) -> None:
    requested = listener_context(_settings(pki, client_auth="requested"))
    assert peer_certificate(listener_handshake(requested, _client(pki))[1]) is None
    with_cert = listener_handshake(requested, _client(pki, pki.client("dana")))[1]
    assert rfc2253_subject(peer_certificate(with_cert) or {}) == "CN=dana,OU=eng,O=Strata,C=NL"
    none = listener_context(_settings(pki))
    assert peer_certificate(listener_handshake(none, _client(pki, pki.client("erin")))[1]) is None


def test_a_truststore_given_inline_verifies_client_certificates(pki: Pki) -> None:
    ctx = listener_context(_settings(pki, client_auth="required", truststore_location=None,
                                     truststore_certificates=pki.ca.read_text()))
    conn = listener_handshake(ctx, _client(pki, pki.client("frank")))[1]
    assert rfc2253_subject(peer_certificate(conn) or {}).startswith("CN=frank,")
    with pytest.raises((ssl.SSLError, SSL.Error)):
        listener_handshake(ctx, _client(pki))


def test_no_session_is_resumed(pki: Pki) -> None:
    """A resumed session would carry no client certificate to map to a principal."""
    client = _client(pki, pki.client("gail"))
    resuming = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # the control: a server that lets sessions resume
    resuming.load_cert_chain(str(pki.keystore))
    first = memory_handshake(resuming, client)
    assert memory_handshake(resuming, client, session=first.session).session_reused
    ctx = listener_context(_settings(pki, client_auth="requested"))
    first, _ = listener_handshake(ctx, client)
    second, conn = listener_handshake(ctx, client, session=first.session)
    assert not second.session_reused
    assert rfc2253_subject(peer_certificate(conn) or {}).startswith("CN=gail,")


def test_the_c_record_loop_decrypts_what_it_is_given_and_leaves_no_error_behind(pki: Pki) -> None:
    """service/security/_tlsread.c, called directly: records out of ciphertext handed over a
    slice at a time, the thread's error queue emptied of another connection's entry, and
    arguments out of range refused."""
    from service.security.tls_engine import address, c_record_loop, lib

    read = c_record_loop()
    if read is None:
        pytest.skip("service.security._tlsread is not built (pip install -e . builds it)")
    client, conn = listener_handshake(listener_context(_settings(pki)), _client(pki))
    plaintext = bytes(range(256)) * 400  # 100 KiB: seven records
    ciphertext = client_records(client, plaintext)
    target = bytearray(len(plaintext))
    lib.ERR_put_error(lib.ERR_LIB_EVP, 0, 1, b"elsewhere.c", 1)  # as a failed connection would leave
    got, start, error = read(address(conn._ssl), address(conn._into_ssl), ciphertext, 0, len(ciphertext),
                             5000, target, 0)
    assert (got, start, error) == (len(plaintext), len(ciphertext), 0)
    assert bytes(target) == plaintext
    assert lib.ERR_peek_error() == 0
    got, start, error = read(address(conn._ssl), address(conn._into_ssl), b"", 0, 0, 5000, target, 0)
    assert (got, start, error) == (0, 0, lib.SSL_ERROR_WANT_READ)
    for bad in ((b"", 1, 0, 5000, target, 0), (b"xy", 0, 3, 5000, target, 0), (b"", 0, 0, 0, target, 0),
                (b"", 0, 0, 5000, target, len(target) + 1)):
        with pytest.raises(ValueError, match="out of range"):
            read(address(conn._ssl), address(conn._into_ssl), *bad)
