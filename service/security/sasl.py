"""The server side of SASL: one exchange per authentication, by mechanism.

``PLAIN`` (RFC 4616: ``authzid NUL authcid NUL password``) is checked against the
user's SCRAM credentials (one user store, as Redpanda does): the password is salted
with the stored salt and iterations and compared with the stored key. That costs one
PBKDF2 (thousands of HMACs), so it runs on a worker thread. ``SCRAM-SHA-256`` and
``SCRAM-SHA-512`` are :class:`service.security.scram.ScramServer`.

:func:`new_exchange` gives an object with ``await evaluate(token) -> response``,
``complete`` and ``username``; a failure is :class:`SaslFailure`, whose message is
Kafka's and carries no secret (it is sent to the client and logged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from service.security.scram import ScramCredential, ScramError, ScramServer

__all__ = ["SaslFailure", "new_exchange"]

#: user → mechanism → credential
CredentialLookup = Callable[[str], dict[str, ScramCredential]]


class SaslFailure(Exception):
    """Authentication failed; ``str()`` is the message for the client and the log."""


class _Plain:
    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self.complete = False
        self.username: str | None = None

    async def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        if authzid and authzid != username:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                              "different from username")
        self.username = username
        credentials = self._lookup(username)
        # the cheapest stored credential is as good as any: it proves the same password
        candidate = min(credentials.values(), key=lambda c: c.iterations, default=None)
        if candidate is None or not await asyncio.to_thread(candidate.check_password, password):
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.complete = True
        return b""


class _Scram:
    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self._server = ScramServer(mechanism, lambda user: lookup(user).get(mechanism))

    @property
    def complete(self) -> bool:
        return self._server.complete

    @property
    def username(self) -> str | None:
        return self._server.username

    async def evaluate(self, token: bytes) -> bytes:
        try:
            return self._server.evaluate(token)
        except ScramError as exc:
            raise SaslFailure(str(exc)) from None


def new_exchange(mechanism: str, lookup: CredentialLookup) -> Any:
    """The server side of one authentication with ``mechanism`` (an enabled one)."""
    if mechanism == "PLAIN":
        return _Plain(lookup)
    return _Scram(mechanism, lookup)
