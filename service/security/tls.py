"""TLS settings from Kafka's ``ssl.*`` configs (PEM only): the server and client
:class:`ssl.SSLContext`, and a certificate subject as Kafka writes it.

Keys and certificates come from files (``ssl.keystore.location``: one PEM file
holding the private key and its certificate chain, or Strata's ``ssl.certificate.location``
and ``ssl.key.location``, two files as a Kubernetes TLS secret holds them;
``ssl.truststore.location``) or from the configs' values (``ssl.keystore.certificate.chain`` +
``ssl.keystore.key``; ``ssl.truststore.certificates``). Values are handed to
OpenSSL through anonymous memory files (``memfd``), never written to disk.
``ssl.key.password`` decrypts an encrypted key. ``ssl.client.auth``: ``none``,
``requested`` (a certificate is verified when the client sends one) or
``required``. ``ssl.enabled.protocols`` bounds the TLS versions; ``ssl.cipher.suites``
(OpenSSL or IANA names) lists the suites of every version, as Kafka's does
(:mod:`service.security.tls13_suites` sets TLS 1.3's, which the ``ssl`` module cannot);
empty: OpenSSL's defaults. A bad setting is a ``ValueError`` at start.

Contexts are built at start, and again when their files change
(:mod:`service.security.tls_reload`); an ``SSLContext`` is safe to share between
connections and threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from common.config.broker import BrokerConfig, ListenerConfig
from service.security.tls13_suites import TLS13_SUITES, set_tls13_suites

log = logging.getLogger(__name__)

__all__ = ["ProtocolPlan", "TlsSettings", "client_context", "keystore_error", "keystore_files", "memory_file",
           "protocol_plan", "rfc2253_subject", "server_context", "tls_settings", "truststore_error"]


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The ``ssl.*`` configs one context is built from (secrets stay out of ``repr``)."""

    keystore_location: str | None
    certificate_chain: str | None
    private_key: str | None
    key_password: str | None
    truststore_location: str | None
    truststore_certificates: str | None
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    endpoint_identification: bool
    certificate_location: str | None = None
    key_location: str | None = None
    #: how often the files are looked at for a new certificate (0: never; service.security.tls_reload)
    reload_interval_ms: int = 0

    def __repr__(self) -> str:
        keystore = self.keystore_location or self.certificate_location or ("<inline>" if self.certificate_chain else None)
        return (f"TlsSettings(keystore={keystore}, "
                f"truststore={self.truststore_location or ('<inline>' if self.truststore_certificates else None)}, "
                f"client_auth={self.client_auth}, protocols={self.enabled_protocols})")

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.certificate_location or (self.certificate_chain and self.private_key))

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)


def tls_settings(config: BrokerConfig | ListenerConfig, client_auth: str | None = None) -> TlsSettings:
    """The TLS settings of ``config`` (``client_auth`` overrides ``ssl.client.auth``)."""
    own = _keystore_view(config)
    chain, key = own("ssl.keystore.certificate.chain"), own("ssl.keystore.key")
    if bool(chain) != bool(key):
        raise ValueError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
    location = own("ssl.keystore.location")
    cert_file, key_file = own("ssl.certificate.location"), own("ssl.key.location")
    if bool(cert_file) != bool(key_file):
        raise ValueError("ssl.certificate.location and ssl.key.location go together")
    if sum(map(bool, (location, chain, cert_file))) > 1:
        raise ValueError("give one of ssl.keystore.location, ssl.certificate.location + ssl.key.location, "
                         "or ssl.keystore.certificate.chain + ssl.keystore.key")
    trust_location, trust_certs = config.get("ssl.truststore.location"), config.get("ssl.truststore.certificates")
    if trust_location and trust_certs:
        raise ValueError("give ssl.truststore.location or ssl.truststore.certificates, not both")
    return TlsSettings(
        keystore_location=location,
        certificate_chain=chain,
        private_key=key,
        key_password=config.get("ssl.key.password"),
        truststore_location=trust_location,
        truststore_certificates=trust_certs,
        client_auth=client_auth or config.get_str("ssl.client.auth"),
        enabled_protocols=tuple(config.get_str("ssl.enabled.protocols").split(",")),
        cipher_suites=tuple(s.strip() for s in config.get_str("ssl.cipher.suites").split(",") if s.strip()),
        endpoint_identification=config.get_str("ssl.endpoint.identification.algorithm").lower() == "https",
        certificate_location=cert_file,
        key_location=key_file,
        reload_interval_ms=config.get_int("ssl.reload.interval.ms"),
    )


_KEYSTORE = ("ssl.keystore.location", "ssl.certificate.location", "ssl.key.location",
             "ssl.keystore.certificate.chain", "ssl.keystore.key")


def _keystore_view(config: BrokerConfig | ListenerConfig) -> Callable[[str], str | None]:
    """How the keystore configs are read: a listener that sets any of them in its own
    ``listener.name.<l>.*`` configs takes the whole keystore from those (its inline PEM
    does not mix with the broker's files), else the broker's."""
    if isinstance(config, ListenerConfig) and config.overridden & set(_KEYSTORE):
        overridden = config.overridden
        return lambda name: config.get(name) if name in overridden else None
    return config.get


_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of a TLS listener; ``ValueError`` naming what is missing or wrong."""
    if not settings.has_keystore:
        raise ValueError("a TLS listener needs a key and certificate: ssl.keystore.location, or "
                         "ssl.certificate.location and ssl.key.location (strata up --ssl-cert "
                         "FILE --ssl-key FILE)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, settings)
    _load_keystore(ctx, settings)
    ctx.verify_mode = _VERIFY[settings.client_auth]
    if settings.client_auth != "none":
        _load_truststore(ctx, settings, ssl.Purpose.CLIENT_AUTH)
    # no session tickets: a resumed session would carry no client certificate to map
    ctx.options |= ssl.OP_NO_TICKET
    # no renegotiation: a write never has to read (service.security.tls_transport)
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a broker connects to another with (its keystore, if any, as client
    certificate; the truststore, or the system's CAs, to verify the peer)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(ctx, settings)
    ctx.check_hostname = settings.endpoint_identification
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_truststore(ctx, settings, ssl.Purpose.SERVER_AUTH)
    if settings.has_keystore:
        _load_keystore(ctx, settings)
    return ctx


@dataclass(frozen=True, slots=True)
class ProtocolPlan:
    """The TLS versions and suites ``ssl.*`` configs allow, for either TLS library
    (:func:`protocol_plan`): ``tls12``/``tls13`` are empty for OpenSSL's defaults."""

    minimum: ssl.TLSVersion
    maximum: ssl.TLSVersion
    tls12: tuple[str, ...]  # OpenSSL names
    tls13: tuple[str, ...]


def protocol_plan(settings: TlsSettings) -> ProtocolPlan:
    """Versions and suites. ``ssl.cipher.suites`` lists the suites of every version, as
    Kafka's (JSSE's) does: an enabled version none of whose suites is listed is off."""
    versions = sorted(_VERSIONS[p] for p in settings.enabled_protocols)
    suites = settings.cipher_suites
    tls13 = tuple(s.upper() for s in suites if s.upper() in TLS13_SUITES)
    tls12 = tuple(_openssl_name(s) for s in suites if s.upper() not in TLS13_SUITES)
    if suites:
        if not tls13 and ssl.TLSVersion.TLSv1_3 in versions:
            log.warning("ssl.cipher.suites lists no TLS 1.3 suite, so TLS 1.3 is off (Kafka's reading of the "
                        "list); add TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256 to keep it")
        versions = [v for v in versions if (tls13 if v == ssl.TLSVersion.TLSv1_3 else tls12)]
        if not versions:
            raise ValueError(f"ssl.cipher.suites ({', '.join(suites)}) names no suite of the enabled "
                             f"protocols ({', '.join(settings.enabled_protocols)})")
    return ProtocolPlan(versions[0], versions[-1], tls12,
                        tls13 if ssl.TLSVersion.TLSv1_3 in versions else ())


def _common(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    plan = protocol_plan(settings)
    ctx.minimum_version, ctx.maximum_version = plan.minimum, plan.maximum
    if plan.tls12:
        try:
            ctx.set_ciphers(":".join(plan.tls12))
        except ssl.SSLError:
            raise ValueError(f"ssl.cipher.suites: OpenSSL knows none of {', '.join(plan.tls12)}") from None
    if plan.tls13:
        try:
            set_tls13_suites(ctx, plan.tls13)
        except ValueError as exc:
            raise ValueError(f"ssl.cipher.suites: {exc}") from None


def _load_keystore(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    try:
        with keystore_files(settings) as (chain, key):
            ctx.load_cert_chain(chain, key, password=settings.key_password)
    except (ssl.SSLError, OSError) as exc:
        raise keystore_error(settings, getattr(exc, "reason", None) or exc.strerror or str(exc)) from None


def _load_truststore(ctx: ssl.SSLContext, settings: TlsSettings, purpose: ssl.Purpose) -> None:
    try:
        if settings.truststore_location:
            ctx.load_verify_locations(cafile=settings.truststore_location)
        elif settings.truststore_certificates:
            ctx.load_verify_locations(cadata=settings.truststore_certificates)
        else:
            ctx.load_default_certs(purpose)
    except (ssl.SSLError, OSError) as exc:
        raise truststore_error(settings, getattr(exc, "reason", None) or str(exc)) from None


@contextlib.contextmanager
def keystore_files(settings: TlsSettings) -> Iterator[tuple[str, str | None]]:
    """(certificate chain file, key file or None when the chain's file holds the key):
    the files of ``settings``' keystore, the inline PEM through :func:`memory_file`."""
    if settings.keystore_location:
        yield settings.keystore_location, None
    elif settings.certificate_location:
        yield settings.certificate_location, settings.key_location
    else:
        assert settings.certificate_chain and settings.private_key
        with memory_file(settings.certificate_chain) as chain, memory_file(settings.private_key) as key:
            yield chain, key


def keystore_error(settings: TlsSettings, reason: str) -> ValueError:
    where = settings.keystore_location or (
        f"{settings.certificate_location} and {settings.key_location}" if settings.certificate_location
        else "ssl.keystore.certificate.chain / ssl.keystore.key")
    return ValueError(f"cannot load the TLS key and certificate from {where}: {reason}")


def truststore_error(settings: TlsSettings, reason: str) -> ValueError:
    where = settings.truststore_location or "ssl.truststore.certificates"
    return ValueError(f"cannot load the trusted certificates from {where}: {reason}")


@contextlib.contextmanager
def memory_file(text: str) -> Iterator[str]:
    """A path OpenSSL can read ``text`` from, backed by memory only."""
    fd = os.memfd_create("strata-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, text.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _openssl_name(name: str) -> str:
    """An IANA/JSSE suite name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) as OpenSSL's
    (``ECDHE-RSA-AES128-GCM-SHA256``); OpenSSL names pass through."""
    if not name.upper().startswith("TLS_") or "_WITH_" not in name.upper():
        return name
    kx, _, cipher = name.upper()[4:].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = ([] if kx == "RSA" else kx.split("_")) + cipher.split("_")
    return "-".join(parts)


_SHORT = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
    "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}


def rfc2253_subject(cert: dict[str, Any]) -> str:
    """The subject of ``SSLSocket.getpeercert()`` as RFC 2253 (``CN=a,OU=b,O=c,C=d``,
    most specific first, as Java's ``X500Principal.getName()``)."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT.get(key, key)}={_escape(value)}" for key, value in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)
