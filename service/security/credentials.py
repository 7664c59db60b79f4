"""SCRAM credentials as the cluster metadata stores them, section ``scram_credentials``::

    {"alice": {"SCRAM-SHA-256": {"salt": "<b64>", "iterations": 8192,
                                 "stored_key": "<b64>", "server_key": "<b64>"},
               "SCRAM-SHA-512": {...}}}

(docs/adr/0021-security-in-the-cluster-metadata.md). :func:`alter_credentials` is Kafka's
AlterUserScramCredentials on that value, pure: the active controller runs it in its
compare-and-set cycle (``MetadataWriter.alter_section``). :func:`user_credentials`
reads a user's credentials from any snapshot.

Pure functions over JSON values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.errors import ErrorCode
from service.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
)

__all__ = ["SECTION", "Deletion", "Upsertion", "alter_credentials", "mechanism_name", "user_credentials"]

SECTION = "scram_credentials"
_BY_ID = {mechanism_id: name for name, (mechanism_id, _) in MECHANISMS.items()}


def mechanism_name(mechanism_id: int) -> str | None:
    """Kafka's ScramMechanism id (1: SCRAM-SHA-256, 2: SCRAM-SHA-512) → its name."""
    return _BY_ID.get(mechanism_id)


@dataclass(frozen=True, slots=True)
class Deletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion({self.name!r}, mechanism={self.mechanism}, iterations={self.iterations})"


def user_credentials(section: Mapping[str, Any] | None, user: str) -> dict[str, ScramCredential]:
    """mechanism → credential of ``user`` (empty when none)."""
    stored = (section or {}).get(user) or {}
    return {mech: ScramCredential.from_json(mech, data) for mech, data in stored.items()}


def alter_credentials(
    section: Mapping[str, Any] | None, deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]
) -> tuple[dict[str, Any], dict[str, tuple[ErrorCode, str | None]]]:
    """The section after Kafka's AlterUserScramCredentials, and each user's result
    ``(error code, message)``; a user with any error has none of its changes applied."""
    current: dict[str, Any] = {user: dict(mechs) for user, mechs in (section or {}).items()}
    results: dict[str, tuple[ErrorCode, str | None]] = {}
    users = [d.name for d in deletions] + [u.name for u in upsertions]
    seen: dict[tuple[str, int], int] = {}
    for key in [(d.name, d.mechanism) for d in deletions] + [(u.name, u.mechanism) for u in upsertions]:
        seen[key] = seen.get(key, 0) + 1
    for user in dict.fromkeys(users):
        if not user:
            results[user] = (ErrorCode.unacceptable_credential, "Username must not be empty")
        elif any(count > 1 for (name, _), count in seen.items() if name == user):
            results[user] = (ErrorCode.duplicate_resource,
                             "A user credential cannot be altered twice in the same request")
    for d in deletions:
        if d.name in results:
            continue
        name = mechanism_name(d.mechanism)
        if name is None:
            results[d.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif name not in current.get(d.name, {}):
            results[d.name] = (ErrorCode.resource_not_found,
                               "Attempt to delete a user credential that does not exist")
    for u in upsertions:
        if u.name in results:
            continue
        name = mechanism_name(u.mechanism)
        if name is None:
            results[u.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            results[u.name] = (ErrorCode.unacceptable_credential,
                               f"Iterations {u.iterations} not in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        elif not u.salt or not u.salted_password:
            results[u.name] = (ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
    for d in deletions:
        if d.name not in results:
            current[d.name].pop(mechanism_name(d.mechanism), None)
    for u in upsertions:
        if u.name not in results:
            name = mechanism_name(u.mechanism)
            assert name is not None
            credential = credential_from_salted_password(name, u.salt, u.iterations, u.salted_password)
            current.setdefault(u.name, {})[name] = credential.to_json()
    for user in users:
        results.setdefault(user, (ErrorCode.none, None))
    return {user: mechs for user, mechs in current.items() if mechs}, results
