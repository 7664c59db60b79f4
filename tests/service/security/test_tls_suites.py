"""``ssl.cipher.suites`` as Kafka reads it: the suites of every TLS version, TLS 1.3's
included, checked by real handshakes against both TLS libraries a broker serves with:
the ``ssl`` module's context (the HTTP listener; service.security.tls13_suites) and the
Kafka listeners' (service.security.tls_engine)."""

from __future__ import annotations

import ssl

import pytest
from OpenSSL import SSL

from service.security.tls import TlsSettings, server_context
from service.security.tls13_suites import set_tls13_suites
from service.security.tls_engine import listener_context
from tests.security_fixtures import Pki, listener_handshake, memory_handshake


@pytest.fixture(params=["ssl-module", "listener"])
def library(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _settings(pki: Pki, suites: tuple[str, ...], protocols: tuple[str, ...]) -> TlsSettings:
    return TlsSettings(
        keystore_location=str(pki.keystore), certificate_chain=None, private_key=None, key_password=None,
        truststore_location=None, truststore_certificates=None, client_auth="none",
        enabled_protocols=protocols, cipher_suites=suites, endpoint_identification=False)


class _Server:
    """A server context of either library, and a handshake against it."""

    def __init__(self, library: str, settings: TlsSettings) -> None:
        self.library = library
        self.context = (server_context if library == "ssl-module" else listener_context)(settings)

    def handshake(self, client: ssl.SSLContext) -> ssl.SSLObject:
        if self.library == "ssl-module":
            return memory_handshake(self.context, client)
        return listener_handshake(self.context, client)[0]


def _server(pki: Pki, suites: tuple[str, ...], protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3"),
            library: str = "ssl-module") -> _Server:
    return _Server(library, _settings(pki, suites, protocols))


def _client(pki: Pki, tls13: tuple[str, ...] = ()) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if tls13:
        set_tls13_suites(ctx, tls13)
    return ctx


def test_by_default_tls13_with_openssls_suites(pki, library) -> None:  # type: ignore[no-untyped-def]
    assert _server(pki, (), library=library).handshake(_client(pki)).cipher()[:2] == (
        "TLS_AES_256_GCM_SHA384", "TLSv1.3")


def test_a_tls13_suite_listed_alone_is_the_only_one(pki, library) -> None:  # type: ignore[no-untyped-def]
    server = _server(pki, ("TLS_AES_256_GCM_SHA384",), library=library)
    assert server.handshake(_client(pki)).cipher()[:2] == ("TLS_AES_256_GCM_SHA384", "TLSv1.3")
    with pytest.raises((ssl.SSLError, SSL.Error)):  # a client offering AES-128 only
        server.handshake(_client(pki, ("TLS_AES_128_GCM_SHA256",)))


def test_the_servers_order_of_tls13_suites_wins(pki, library) -> None:  # type: ignore[no-untyped-def]
    server = _server(pki, ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"), library=library)
    # the client prefers AES-256 (OpenSSL's default order); the server's list says AES-128
    assert server.handshake(_client(pki)).cipher()[0] == "TLS_AES_128_GCM_SHA256"


def test_tls12_suites_alone_turn_tls13_off(pki, library) -> None:  # type: ignore[no-untyped-def]
    server = _server(pki, ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",), library=library)  # IANA name, as Kafka's
    assert server.handshake(_client(pki)).cipher()[:2] == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2")


def test_both_versions_listed_keep_both(pki, library) -> None:  # type: ignore[no-untyped-def]
    server = _server(pki, ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLS_CHACHA20_POLY1305_SHA256"), library=library)
    assert server.handshake(_client(pki)).cipher()[:2] == ("TLS_CHACHA20_POLY1305_SHA256", "TLSv1.3")
    only12 = _client(pki)
    only12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert server.handshake(only12).cipher()[:2] == ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLSv1.2")


def test_without_suites_tls12_offers_what_the_ssl_module_offers(pki, library) -> None:  # type: ignore[no-untyped-def]
    # a client with only a CBC suite the ssl module leaves out of its defaults (SHA-1) is refused by both
    server = _server(pki, (), ("TLSv1.2",), library=library)
    old = ssl.create_default_context(cafile=str(pki.ca))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    old.set_ciphers("ECDHE-ECDSA-AES128-SHA")
    with pytest.raises((ssl.SSLError, SSL.Error)):
        server.handshake(old)
    assert server.handshake(_client(pki)).cipher()[1] == "TLSv1.2"


@pytest.mark.parametrize(("suites", "protocols", "message"), [
    (("TLS_AES_256_GCM_SHA384",), ("TLSv1.2",), "names no suite of the enabled protocols"),
    (("NO-SUCH-SUITE",), ("TLSv1.2",), "OpenSSL knows none of"),
])
def test_suites_that_leave_nothing_to_negotiate_are_refused_at_start(pki, library, suites, protocols, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        _server(pki, suites, protocols, library)


def test_set_tls13_suites_refuses_names_that_are_not_tls13_suites() -> None:
    with pytest.raises(ValueError, match="not TLS 1.3 cipher suites: ECDHE-RSA-AES128-GCM-SHA256"):
        set_tls13_suites(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ["ECDHE-RSA-AES128-GCM-SHA256"])
