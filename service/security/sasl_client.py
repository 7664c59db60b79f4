"""The client side of SASL, for a broker authenticating to its peers (PLAIN, SCRAM).

:func:`sasl_client` gives an object with ``first()`` (the first token) and
``respond(server token) -> next token or None`` (None: done); ``ValueError`` when the
server's answer is wrong (a SCRAM server that does not prove it knows the key).
"""

from __future__ import annotations

from typing import Any

from service.security.scram import ScramClient

__all__ = ["sasl_client"]


class _PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._token = b"\0" + username.encode() + b"\0" + password.encode()

    def first(self) -> bytes:
        return self._token

    def respond(self, token: bytes) -> bytes | None:
        return None


class _ScramExchange:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._client = ScramClient(mechanism, username, password)
        self._step = 0

    def first(self) -> bytes:
        return self._client.first()

    def respond(self, token: bytes) -> bytes | None:
        self._step += 1
        if self._step == 1:
            return self._client.final(token)
        self._client.verify(token)
        return None


def sasl_client(mechanism: str, username: str, password: str) -> Any:
    if mechanism == "PLAIN":
        return _PlainClient(username, password)
    return _ScramExchange(mechanism, username, password)
