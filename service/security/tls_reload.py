"""TLS contexts that follow their PEM files: certificates rotate without a restart.

Certificates are rotated by replacing their files (cert-manager, a Vault agent, a cron
job). Every ``ssl.reload.interval.ms`` the broker reads the files of each TLS context
(``ssl.keystore.location`` or ``ssl.certificate.location`` and ``ssl.key.location``,
``ssl.truststore.location``; through symlinks, so a Kubernetes secret's swap counts) and
compares their digests with the ones in use. Files that changed are loaded once they
have stayed the same for one more interval (a writer replacing the certificate and then
the key is not caught half-way), and checked before they are put in use:

* the key must match the certificate (OpenSSL's check), and the certificate must be
  valid now;
* its subject must be the old one's and its subject alternative names must include the
  old ones (Kafka's rule for a dynamic keystore update: clients that verify the host
  name keep working).

A load that the files changed under is thrown away and done again at the next check.
New connections then handshake with the new context; open ones keep the one they began
with, as in Kafka. Files that fail a check leave the working context in place, log a
warning naming the reason, and are read again when they change next. Inline PEM
(``ssl.keystore.certificate.chain``) has no file to follow and never reloads.

The Kafka listeners take :attr:`ReloadingTls.listener_context` (their TLS library's,
:mod:`service.security.tls_engine`) and the inter-broker client :attr:`ReloadingTls.context`
for each new connection; both are built from the same files and replaced together.
aiohttp holds one :class:`ssl.SSLContext` for good, so the HTTP listener is given
:attr:`ReloadingTls.front`, whose server-name callback (OpenSSL calls it for every
ClientHello, with or without SNI) moves each handshake onto the current context.

``/metrics`` shows each context's certificate expiry, its truststore's earliest expiry
and its reloads (:mod:`service.http.metrics`). Not thread-safe: checked on the event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from service.security.tls import TlsSettings, client_context, server_context

if TYPE_CHECKING:
    from OpenSSL import SSL

__all__ = ["CertificateFacts", "ReloadingTls", "TlsSources", "certificate_facts"]

log = logging.getLogger(__name__)

Stamp = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class CertificateFacts:
    """What the checks and ``/metrics`` need of a context's certificates."""

    subject: str | None  # the leaf's subject, RFC 4514; None without a keystore
    alt_names: frozenset[str]
    not_before: float | None  # Unix seconds
    not_after: float | None
    truststore_not_after: float | None  # the earliest expiry among the trusted certificates


def certificate_facts(settings: TlsSettings) -> CertificateFacts:
    """The facts of ``settings``' PEM certificates (``ValueError`` if they do not parse)."""
    from cryptography import x509  # only brokers with TLS pay for the import

    def certs(location: str | None, inline: str | None) -> list[x509.Certificate]:
        data = Path(location).read_bytes() if location else (inline or "").encode()
        if not data:
            return []
        try:
            return x509.load_pem_x509_certificates(data)
        except ValueError:
            raise ValueError(f"no PEM certificate in {location or 'the inline PEM'}") from None

    try:
        chain = certs(settings.keystore_location or settings.certificate_location, settings.certificate_chain)
        trusted = certs(settings.truststore_location, settings.truststore_certificates)
        trust_end = min((c.not_valid_after_utc.timestamp() for c in trusted), default=None)
        if not chain:
            return CertificateFacts(None, frozenset(), None, None, trust_end)
        leaf = chain[0]
        try:
            sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            alt_names = frozenset(f"{type(n).__name__}:{n.value}" for n in sans)
        except x509.ExtensionNotFound:
            alt_names = frozenset()
        return CertificateFacts(leaf.subject.rfc4514_string(), alt_names, leaf.not_valid_before_utc.timestamp(),
                                leaf.not_valid_after_utc.timestamp(), trust_end)
    except OSError as exc:
        raise ValueError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except ValueError:
        raise
    except Exception as exc:  # cryptography's own (a duplicate extension, an unknown name type, ...)
        raise ValueError(f"a certificate does not parse: {type(exc).__name__}: {exc}") from None


def _stamp(paths: Iterable[str]) -> Stamp:
    """Each file's digest (None when it cannot be read): the files are a few KiB."""
    out = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                out.append((path, hashlib.sha256(f.read(_MAX_PEM)).digest()))
        except OSError:
            out.append((path, None))
    return tuple(out)


_MAX_PEM = 1 << 20  # a PEM file larger than this is read this far, to compare


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


class ReloadingTls:
    """One TLS context and the files it is built from (see the module docstring)."""

    def __init__(self, label: str, settings: TlsSettings, *, server: bool,
                 clock: Callable[[], float] = time.time) -> None:
        self.label = label
        self.settings = settings
        self.server = server
        self._clock = clock
        self._files = tuple(p for p in (settings.keystore_location, settings.certificate_location,
                                        settings.key_location, settings.truststore_location) if p)
        self._stamp = _stamp(self._files)
        self._pending: Stamp | None = None  # changed files waiting one interval to settle
        #: the context new connections use (the ssl module's: HTTP listener, inter-broker client)
        self.context, self.listener_context = self._build()
        self.facts = certificate_facts(settings)
        self._front: ssl.SSLContext | None = None
        self.reloads = 0
        self.failures = 0
        self.next_check = clock() + self.interval_s
        _warn_if_expiring(label, self.facts, clock())

    @property
    def interval_s(self) -> float:
        return self.settings.reload_interval_ms / 1000

    @property
    def follows_files(self) -> bool:
        return bool(self._files) and self.settings.reload_interval_ms > 0

    def _build(self) -> tuple[ssl.SSLContext, SSL.Context | None]:
        """The ``ssl`` module's context, and for a server the Kafka listeners' own
        (:mod:`service.security.tls_engine`), from the same settings."""
        if not self.server:
            return client_context(self.settings), None
        from service.security.tls_engine import check_bindings, listener_context

        check_bindings()
        return server_context(self.settings), listener_context(self.settings)

    @property
    def front(self) -> ssl.SSLContext:
        """A server context that stays the same object: its server-name callback moves
        each handshake onto :attr:`context` (for a server that holds one context, aiohttp)."""
        if self._front is None:
            assert self.server, "a client context has no front"
            self._front = server_context(self.settings)  # its own: :attr:`context`'s connections get no callback
            self._front.sni_callback = self._switch
        return self._front

    def _switch(self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                context: ssl.SSLContext) -> None:
        current = self.context
        if current is not context:
            conn.context = current

    def check(self) -> bool:
        """Load the files if they changed and have settled: True when a new context is in use."""
        self.next_check = self._clock() + self.interval_s
        stamp = _stamp(self._files)
        if stamp == self._stamp:
            self._pending = None
            return False
        if stamp != self._pending:
            self._pending = stamp  # changed since the last look: wait for them to settle
            return False
        error: ValueError | None = None
        try:
            facts = certificate_facts(self.settings)
            self._compatible(facts)
            context, listener = self._build()
        except ValueError as exc:
            error = exc
        if _stamp(self._files) != stamp:
            return False  # changed while being read: what was checked may not be what was loaded
        self._stamp, self._pending = stamp, None  # a failure is reported once; read again on a change
        if error is not None:
            self.failures += 1
            log.warning("TLS %s: the changed files are not used: %s. Still using the certificate loaded "
                        "before (expires %s); fix the files, they are read again when they change",
                        self.label, error, _when(self.facts.not_after))
            return False
        self.context, self.listener_context, self.facts = context, listener, facts
        self.reloads += 1
        log.info("TLS %s: reloaded %s; the certificate expires %s", self.label, ", ".join(self._files),
                 _when(facts.not_after))
        _warn_if_expiring(self.label, facts, self._clock())
        return True

    def _compatible(self, new: CertificateFacts) -> None:
        old, now = self.facts, self._clock()
        if new.subject is None:
            return
        if new.not_before is not None and new.not_before > now:
            raise ValueError(f"the new certificate is not valid before {_when(new.not_before)}")
        if new.not_after is not None and new.not_after <= now:
            raise ValueError(f"the new certificate expired {_when(new.not_after)}")
        if old.subject is not None and new.subject != old.subject:
            raise ValueError(f"the new certificate's subject {new.subject!r} is not the old one's {old.subject!r}")
        missing = old.alt_names - new.alt_names
        if missing:
            raise ValueError(f"the new certificate lacks the subject alternative names {', '.join(sorted(missing))}")


_SOON_S = 14 * 86400


def _warn_if_expiring(label: str, facts: CertificateFacts, now: float) -> None:
    for what, end in (("certificate", facts.not_after), ("earliest trusted certificate", facts.truststore_not_after)):
        if end is not None and end - now < _SOON_S:
            log.warning("TLS %s: the %s %s %s", label, what, "expired" if end <= now else "expires", _when(end))


class TlsSources:
    """Every TLS context of one broker; those with the same settings are one."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._by_key: dict[tuple[TlsSettings, bool], ReloadingTls] = {}

    @property
    def sources(self) -> list[ReloadingTls]:
        return list(self._by_key.values())

    def get(self, label: str, settings: TlsSettings, *, server: bool) -> ReloadingTls:
        """The context for ``settings`` (``ValueError`` from building it); ``label`` names its user."""
        key = (settings, server)
        source = self._by_key.get(key)
        if source is None:
            source = self._by_key[key] = ReloadingTls(label, settings, server=server, clock=self._clock)
        elif label not in source.label.split(", "):
            source.label += f", {label}"
        return source

    def check_due(self) -> None:
        now = self._clock()
        for source in self._by_key.values():
            if source.follows_files and source.next_check <= now:
                source.check()

    async def run(self) -> None:
        """Check the files until cancelled (nothing to do when none is followed)."""
        intervals = [s.interval_s for s in self._by_key.values() if s.follows_files]
        if not intervals:
            return
        tick = min(intervals)
        while True:
            await asyncio.sleep(tick)
            try:
                self.check_due()
            except Exception:  # a broker keeps serving on the contexts it has
                log.exception("TLS: checking the certificate files failed")
