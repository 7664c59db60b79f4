"""Certificate rotation without a restart (service.security.tls_reload): real TLS
handshakes (OpenSSL through the ssl module, over memory BIOs) against a context whose
PEM files are replaced underneath it."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import time
from pathlib import Path

import pytest
from OpenSSL import SSL

from service.security.tls import TlsSettings
from service.security.tls_reload import ReloadingTls, TlsSources
from tests.security_fixtures import Pki, listener_handshake, memory_handshake


def _settings(cert: Path | None = None, key: Path | None = None, truststore: Path | None = None,
              client_auth: str = "none", interval_ms: int = 1000) -> TlsSettings:
    return TlsSettings(
        keystore_location=None, certificate_chain=None, private_key=None, key_password=None,
        truststore_location=None if truststore is None else str(truststore), truststore_certificates=None,
        client_auth=client_auth, enabled_protocols=("TLSv1.2", "TLSv1.3"), cipher_suites=(),
        endpoint_identification=False,
        certificate_location=None if cert is None else str(cert), key_location=None if key is None else str(key),
        reload_interval_ms=interval_ms,
    )


def _handshake(server: ssl.SSLContext | SSL.Context, client: ssl.SSLContext, sni: bool = True) -> bytes:
    """The DER certificate the client was served by an ``ssl`` module context or a Kafka
    listener's (``ssl.SSLError`` or ``OpenSSL.SSL.Error`` if refused)."""
    if not sni:
        client.check_hostname = False
    name = "localhost" if sni else None
    cli = (memory_handshake(server, client, name) if isinstance(server, ssl.SSLContext)
           else listener_handshake(server, client, name)[0])
    der = cli.getpeercert(binary_form=True)
    assert der is not None
    return der


def _reload(source: ReloadingTls) -> bool:
    """Two checks an interval apart: changed files are loaded once they stay the same."""
    if source.check():
        raise AssertionError("files loaded the moment they changed, before settling")
    return source.check()


def _der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def _client(pki: Pki, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def _put(src: tuple[Path, Path], dst: tuple[Path, Path], atomic: bool = True) -> None:
    """Replace dst's certificate and key files by src's: by rename (Kubernetes swaps a
    secret's files atomically) or by writing the same inodes."""
    for a, b in zip(src, dst, strict=True):
        if atomic:
            tmp = b.with_suffix(".tmp")
            shutil.copyfile(a, tmp)
            os.replace(tmp, b)
        else:
            b.write_bytes(a.read_bytes())


@pytest.fixture
def live(tmp_path: Path, pki: Pki) -> tuple[Path, Path]:
    """The broker's certificate and key files, a copy it may replace."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _put((pki.server_cert, pki.server_key), (cert, key))
    return cert, key


@pytest.mark.parametrize("atomic", [True, False], ids=["renamed", "rewritten"])
def test_new_handshakes_get_the_replaced_certificate(live, pki, atomic) -> None:  # type: ignore[no-untyped-def]
    source = ReloadingTls("listener SSL", _settings(*live), server=True)
    http = source.front  # what aiohttp holds, for good; the Kafka listeners take .listener_context per connection
    assert _handshake(source.context, _client(pki)) == _der(pki.server_cert)
    assert _handshake(source.listener_context, _client(pki)) == _der(pki.server_cert)
    assert _handshake(http, _client(pki)) == _der(pki.server_cert)
    assert not source.check()  # nothing changed: nothing rebuilt
    nxt = pki.server("rotated")
    _put(nxt, live, atomic)
    assert _reload(source)
    assert _handshake(source.context, _client(pki)) == _der(nxt[0])
    assert _handshake(source.context, _client(pki), sni=False) == _der(nxt[0])
    assert _handshake(source.listener_context, _client(pki)) == _der(nxt[0])
    assert _handshake(http, _client(pki)) == _der(nxt[0])
    assert _handshake(http, _client(pki), sni=False) == _der(nxt[0])  # OpenSSL calls back without SNI too
    assert (source.reloads, source.failures) == (1, 0)
    assert source.facts.not_after == pytest.approx(_not_after(nxt[0]))
    assert not source.check()


def _not_after(cert: Path) -> float:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()


def test_files_that_do_not_load_leave_the_working_certificate(live, pki, caplog) -> None:  # type: ignore[no-untyped-def]
    source = ReloadingTls("listener SSL", _settings(*live), server=True)
    nxt_cert, nxt_key = pki.server("half-written")
    live[0].write_bytes(nxt_cert.read_bytes())  # the certificate is new, the key still the old one
    assert not source.check()  # changed: waits an interval for the key to follow
    live[1].write_bytes(nxt_key.read_bytes())  # it does: the pair loads, and nothing was refused
    assert _reload(source)
    assert source.failures == 0
    assert _handshake(source.context, _client(pki)) == _der(nxt_cert)
    live[1].write_bytes(pki.server("stray")[1].read_bytes())  # a key that stays wrong
    with caplog.at_level(logging.WARNING, logger="service.security.tls_reload"):
        assert not _reload(source)
    assert "listener SSL" in caplog.text and "not used" in caplog.text
    assert _handshake(source.context, _client(pki)) == _der(nxt_cert)
    assert not source.check()  # reported once; read again only when the files change
    live[0].write_text("not a certificate")
    assert not _reload(source)
    live[0].unlink()
    assert not _reload(source)
    assert _handshake(source.context, _client(pki)) == _der(nxt_cert)
    assert _handshake(source.listener_context, _client(pki)) == _der(nxt_cert)
    assert (source.reloads, source.failures) == (1, 3)


@pytest.mark.parametrize(("change", "reason"), [
    ({"common_name": "someone-else"}, "subject"),
    ({"names": ("localhost",)}, "subject alternative names IPAddress:127.0.0.1"),
    ({"valid": (-48.0, -1.0)}, "expired"),
    ({"valid": (2.0, 48.0)}, "not valid before"),
])
def test_a_certificate_clients_would_refuse_is_not_put_in_use(live, pki, caplog, change, reason) -> None:  # type: ignore[no-untyped-def]
    """Kafka's rule for a new keystore: the same subject, at least the same names; and
    a certificate valid now."""
    source = ReloadingTls("listener SSL", _settings(*live), server=True)
    _put(pki.server(f"bad-{reason[:8]}", **change), live)
    with caplog.at_level(logging.WARNING, logger="service.security.tls_reload"):
        assert not _reload(source)
    assert reason in caplog.text
    assert _handshake(source.context, _client(pki)) == _der(pki.server_cert)
    assert source.failures == 1


def test_a_certificate_with_more_names_is_put_in_use(live, pki) -> None:  # type: ignore[no-untyped-def]
    source = ReloadingTls("listener SSL", _settings(*live), server=True)
    wider = pki.server("wider", names=("localhost", "127.0.0.1", "broker-1.example.com"))
    _put(wider, live)
    assert _reload(source)
    assert _handshake(source.context, _client(pki)) == _der(wider[0])


def test_a_new_truststore_admits_client_certificates_of_a_new_ca(live, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "other-ca").mkdir()
    other = Pki(tmp_path / "other-ca", ca_name="The next CA")
    truststore = tmp_path / "truststore.pem"
    truststore.write_bytes(pki.ca.read_bytes())
    source = ReloadingTls("listener SSL", _settings(*live, truststore=truststore, client_auth="required"),
                          server=True)
    newcomer = _client(pki, other.client("newcomer"))
    with pytest.raises(ssl.SSLError):
        _handshake(source.front, newcomer)
    with pytest.raises((ssl.SSLError, SSL.Error)):
        _handshake(source.listener_context, _client(pki, other.client("newcomer")))
    truststore.write_bytes(pki.ca.read_bytes() + other.ca.read_bytes())
    assert _reload(source)
    # the front's switch keeps client authentication
    for server in (source.context, source.front, source.listener_context):
        assert _handshake(server, _client(pki, other.client("newcomer"))) == _der(pki.server_cert)
        assert _handshake(server, _client(pki, pki.client("alice"))) == _der(pki.server_cert)
        with pytest.raises((ssl.SSLError, SSL.Error)):  # no certificate: still required
            _handshake(server, _client(pki))
    assert source.facts.truststore_not_after == pytest.approx(min(_not_after(pki.ca), _not_after(other.ca)))


def test_the_inter_broker_client_context_follows_its_truststore(live, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "other-ca").mkdir()
    other = Pki(tmp_path / "other-ca", ca_name="The next CA")
    truststore = tmp_path / "truststore.pem"
    truststore.write_bytes(pki.ca.read_bytes())
    client = ReloadingTls("inter-broker client", _settings(truststore=truststore), server=False)
    peer = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    peer.load_cert_chain(*other.server("peer"))  # a peer whose certificate a new CA signed
    with pytest.raises(ssl.SSLError):
        _handshake(peer, client.context)
    truststore.write_bytes(pki.ca.read_bytes() + other.ca.read_bytes())
    assert _reload(client)
    _handshake(peer, client.context)


def test_sources_share_a_context_per_settings_and_check_on_their_interval(live, pki) -> None:  # type: ignore[no-untyped-def]
    now = [time.time()]
    sources = TlsSources(clock=lambda: now[0])
    a = sources.get("listener SSL", _settings(*live, interval_ms=5000), server=True)
    b = sources.get("HTTP listener", _settings(*live, interval_ms=5000), server=True)
    still = sources.get("listener INTERNAL", _settings(*live, interval_ms=0), server=True)
    assert a is b and a.label == "listener SSL, HTTP listener"
    assert still is not a and not still.follows_files
    _put(pki.server("interval"), live)
    now[0] += 4.9
    sources.check_due()
    assert a.reloads == 0  # not due yet
    for _ in range(2):  # the change seen, then settled
        now[0] += 5.1
        sources.check_due()
    assert (a.reloads, still.reloads) == (1, 0)


def test_run_ends_at_once_when_no_context_follows_files(pki) -> None:  # type: ignore[no-untyped-def]
    sources = TlsSources()
    inline = TlsSettings(
        keystore_location=None, certificate_chain=pki.server_cert.read_text(), private_key=pki.server_key.read_text(),
        key_password=None, truststore_location=None, truststore_certificates=None, client_auth="none",
        enabled_protocols=("TLSv1.3",), cipher_suites=(), endpoint_identification=False, reload_interval_ms=1000)
    sources.get("listener SSL", inline, server=True)
    asyncio.run(asyncio.wait_for(sources.run(), 5))  # inline PEM has no file to follow
