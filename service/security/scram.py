"""SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: credentials, the server's exchange and
the client's (brokers authenticating to each other).

A stored credential is Kafka's: ``salt``, ``iterations`` (4096 to 16384),
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` with
``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``; the password and the
salted password are never stored (docs/adr/0021-security-in-the-cluster-metadata.md).

The exchange: client-first ``n,,n=<user>,r=<nonce>[,extensions]``; server-first
``r=<nonce+server nonce>,s=<salt>,i=<iterations>``; client-final
``c=biws,r=<nonce>,p=<proof>``; server-final ``v=<signature>``. Kafka's extensions
(``tokenauth=true`` for delegation tokens) are refused: Strata has no delegation tokens.
No channel binding (``p=`` in the GS2 header is refused, as Kafka does). Every failure
is a :class:`ScramError` whose message names no secret.

Pure computation; an exchange object is used by one connection at a time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "credential_from_salted_password",
    "make_credential",
    "salted_password",
]

#: mechanism → (Kafka's ScramMechanism id in AlterUserScramCredentials, hash name)
MECHANISMS: dict[str, tuple[int, str]] = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramError(ValueError):
    """The exchange failed; the message is safe to log and to send to the client."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:
        return f"ScramCredential({self.mechanism}, iterations={self.iterations})"

    def to_json(self) -> dict[str, Any]:
        enc = base64.b64encode
        return {"salt": enc(self.salt).decode(), "iterations": self.iterations,
                "stored_key": enc(self.stored_key).decode(), "server_key": enc(self.server_key).decode()}

    @classmethod
    def from_json(cls, mechanism: str, data: dict[str, Any]) -> ScramCredential:
        dec = base64.b64decode
        return cls(mechanism, dec(data["salt"]), int(data["iterations"]), dec(data["stored_key"]),
                   dec(data["server_key"]))

    def check_password(self, password: str) -> bool:
        """Whether ``password`` is this credential's (PLAIN checks against SCRAM credentials)."""
        digest = MECHANISMS[self.mechanism][1]
        salted = salted_password(digest, password, self.salt, self.iterations)
        client_key = _hmac(digest, salted, b"Client Key")
        return hmac.compare_digest(hashlib.new(digest, client_key).digest(), self.stored_key)


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def salted_password(digest: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """What AlterUserScramCredentials stores of the salted password a client computed."""
    digest = MECHANISMS[mechanism][1]
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(mechanism, salt, iterations, hashlib.new(digest, client_key).digest(),
                           _hmac(digest, salted, b"Server Key"))


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    salt = salt or secrets.token_bytes(32)
    digest = MECHANISMS[mechanism][1]
    return credential_from_salted_password(mechanism, salt, iterations,
                                           salted_password(digest, password, salt, iterations))


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise ScramError("Invalid SCRAM message")
        out[key] = value
    return out


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma, ``=3D`` an equals sign."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("Invalid username encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one exchange. ``lookup(username)`` gives the user's credential
    for this mechanism, or None."""

    def __init__(self, mechanism: str, lookup: Any) -> None:
        self.mechanism = mechanism
        self._digest = MECHANISMS[mechanism][1]
        self._lookup = lookup
        self._state = "first"
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_nonce = ""
        self._auth_prefix = ""

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM message") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise ScramError("SCRAM exchange already complete")

    def _first(self, text: str) -> bytes:
        gs2, _, bare = text.partition(",")
        authzid, _, bare = bare.partition(",")
        if gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("Invalid SCRAM client first message (channel binding is not supported)")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("Invalid SCRAM client first message")
        extensions = {k: v for k, v in attrs.items() if k not in ("n", "r")}
        if extensions:
            raise ScramError("SCRAM extensions (delegation tokens) are not supported")
        username = _sasl_name(attrs["n"])
        if authzid and _sasl_name(authzid[2:]) != username:
            raise ScramError("Authentication failed: Client requested an authorization id that is "
                             "different from username")
        credential = self._lookup(username)
        if credential is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        self.username, self._credential = username, credential
        self._client_nonce = attrs["r"]
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        self._state = "final"
        return server_first.encode()

    def _final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, _, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof) if without_proof else {}
        # librdkafka before 2.6.1 sends its own nonce once more in front of ours
        # (librdkafka#4895); Kafka 3.8.1-3.9 accepted that form, and so does Strata: the
        # server nonce is still the one of this exchange, so replays are still refused.
        if not proof_part or attrs.get("r") not in (self._nonce, self._client_nonce + self._nonce):
            raise ScramError("Invalid SCRAM client final message (nonce)")
        if attrs.get("c") not in ("biws", "eSws"):  # base64 of "n,," and "y,,"
            raise ScramError("Invalid SCRAM client final message (channel binding)")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("Invalid SCRAM client final message (proof)") from None
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        signature = _hmac(self._digest, self._credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Authentication failed: Invalid client final message (proof)")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), self._credential.stored_key):
            raise ScramError(f"Authentication failed during authentication due to invalid credentials "
                             f"with SASL mechanism {self.mechanism}")
        self._state = "done"
        server_signature = _hmac(self._digest, self._credential.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}".encode()


class ScramClient:
    """The client side (a broker authenticating to a peer)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._digest = MECHANISMS[mechanism][1]
        self._username = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = secrets.token_urlsafe(24)
        self._bare = f"n={self._username},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attributes(text)
        if not attrs.get("r", "").startswith(self._nonce) or "s" not in attrs or "i" not in attrs:
            raise ScramError("Invalid SCRAM server first message")
        iterations = int(attrs["i"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS * 4:
            raise ScramError("SCRAM iterations out of range")
        salted = salted_password(self._digest, self._password, base64.b64decode(attrs["s"]), iterations)
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = _hmac(self._digest, salted, b"Client Key")
        signature = _hmac(self._digest, hashlib.new(self._digest, client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self._digest, _hmac(self._digest, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode())
        if "v" not in attrs or not hmac.compare_digest(base64.b64decode(attrs["v"]), self._server_signature):
            raise ScramError(f"the server's SCRAM signature is wrong{': ' + attrs['e'] if 'e' in attrs else ''}")
