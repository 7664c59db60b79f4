"""Who sent a request: :class:`KafkaPrincipal` (Kafka's ``type:name``, ``User:alice``).

An unauthenticated connection (PLAINTEXT, or SSL without a client certificate) is
``User:ANONYMOUS``, as in Kafka. SASL gives ``User:<username>``; SSL with a client
certificate gives ``User:<name mapped from its subject>``
(:mod:`service.security.principal_mapping`).

Frozen; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "USER_TYPE", "KafkaPrincipal"]

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Kafka's principal: a type (``User``, ``Group``...) and a name."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` → the principal; ``ValueError`` without a ``:`` (Kafka's
        ``SecurityUtils.parseKafkaPrincipal``). ``User:*`` is the wildcard of ACLs."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is TYPE:NAME (e.g. User:alice), got {text!r}")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
