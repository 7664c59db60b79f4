"""Client quotas as the cluster metadata stores them, section ``client_quotas``::

    [{"entity": {"user": "alice", "client-id": null}, "values": {"producer_byte_rate": 1048576.0}}]

An entity names a ``user`` and/or a ``client-id``, or an ``ip`` alone (KIP-612's
``connection_creation_rate``, read by :mod:`service.quotas.connections` through
:func:`ip_rates`); ``null`` is Kafka's ``<default>``.
:func:`quota_for` resolves a (user, client id) in Kafka's order (user+client, user+
default client, user, default user+client, default user+default client, default user,
client, default client) and says which entity matched (its sensor is per matched
entity, as Kafka's). :func:`alter_quotas` and :func:`describe_quotas` are
AlterClientQuotas and DescribeClientQuotas on the stored value, pure
(docs/adr/0021-security-in-the-cluster-metadata.md).

Pure functions over JSON values; thread-safe.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

from common.errors import ErrorCode

__all__ = ["IP_KEYS", "IP_RATE_KEY", "KEYS", "SECTION", "alter_quotas", "describe_quotas", "ip_rates", "quota_for"]

SECTION = "client_quotas"
KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage"})
IP_RATE_KEY = "connection_creation_rate"
IP_KEYS = frozenset({IP_RATE_KEY})
_TYPES = ("user", "client-id", "ip")
Entity = tuple[tuple[str, str | None], ...]  # ((type, name or None for <default>), ...) sorted by type

#: Kafka's resolution order: (user part, client part); "x" the actual name, None <default>, "-" absent
_ORDER = (("x", "x"), ("x", None), ("x", "-"), (None, "x"), (None, None), (None, "-"), ("-", "x"), ("-", None))


def _entity(data: dict[str, Any]) -> Entity:
    return tuple(sorted((k, v) for k, v in data.items()))


def _index(section: Iterable[dict[str, Any]] | None) -> dict[Entity, dict[str, float]]:
    return {_entity(item["entity"]): dict(item["values"]) for item in section or ()}


def quota_for(section: Any, key: str, user: str, client_id: str) -> tuple[float, Entity] | None:
    """The quota ``key`` of (user, client id) and the entity it came from, or None."""
    index = _index(section)
    for user_part, client_part in _ORDER:
        entity: list[tuple[str, str | None]] = []
        if user_part != "-":
            entity.append(("user", user if user_part == "x" else None))
        if client_part != "-":
            entity.append(("client-id", client_id if client_part == "x" else None))
        found = index.get(tuple(sorted(entity)))
        if found is not None and key in found:
            return float(found[key]), tuple(sorted(entity))
    return None


def _validate(entity: Sequence[tuple[str, str | None]], ops: Sequence[tuple[str, float, bool]]) -> str | None:
    types = [t for t, _ in entity]
    if not types or len(set(types)) != len(types):
        return "Invalid quota entity: each entity type at most once, at least one"
    unknown = [t for t in types if t not in _TYPES]
    if unknown:
        return f"Unsupported quota entity type {unknown[0]} (Strata: user, client-id, ip)"
    keys = KEYS
    if "ip" in types:
        if len(types) > 1:
            return "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
        name = dict(entity)["ip"]
        if name is not None and _address(name) is None:
            return f"{name} is not a valid IP address (Strata keeps IP quotas by address, not host name)"
        keys = IP_KEYS
    for key, value, remove in ops:
        if key not in keys:
            return f"Invalid configuration key {key} (one of {', '.join(sorted(keys))} for this entity)"
        if not remove and not value > 0:
            return f"Quota {key} must be positive, got {value}"
        if not remove and key in IP_KEYS and (value % 1 or value > 2**31 - 1):
            return f"{key} must be a whole number of connections per second up to {2**31 - 1}"
    return None


def _address(name: str) -> str | None:
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    return str(getattr(address, "ipv4_mapped", None) or address)


def ip_rates(section: Any) -> tuple[dict[str, float], float | None]:
    """The ``connection_creation_rate`` of each address that has one, and the ``<default>``
    ip's (None: no default)."""
    rates: dict[str, float] = {}
    default = None
    for entity, values in _index(section).items():
        names = dict(entity)
        if set(names) != {"ip"} or IP_RATE_KEY not in values:
            continue
        if names["ip"] is None:
            default = float(values[IP_RATE_KEY])
        elif (address := _address(names["ip"])) is not None:
            rates[address] = float(values[IP_RATE_KEY])
    return rates, default


def alter_quotas(section: Any, entries: Sequence[tuple[Sequence[tuple[str, str | None]], Sequence[tuple[str, float, bool]]]],
                 validate_only: bool) -> tuple[list[dict[str, Any]] | Any, list[tuple[ErrorCode, str | None]]]:
    """The section after AlterClientQuotas and each entry's ``(error code, message)``."""
    index = _index(section)
    results: list[tuple[ErrorCode, str | None]] = []
    for entity, ops in entries:
        problem = _validate(entity, ops)
        if problem is not None:
            results.append((ErrorCode.invalid_request, problem))
            continue
        results.append((ErrorCode.none, None))
        key = tuple(sorted(entity))
        values = dict(index.get(key, {}))
        for name, value, remove in ops:
            if remove:
                values.pop(name, None)
            else:
                values[name] = float(value)
        if values:
            index[key] = values
        else:
            index.pop(key, None)
    if validate_only:
        return section, results
    return [{"entity": dict(k), "values": dict(sorted(v.items()))} for k, v in sorted(
        index.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])], results


def describe_quotas(section: Any, components: Sequence[tuple[str, int, str | None]],
                    strict: bool) -> list[tuple[Entity, dict[str, float]]]:
    """Entries matching DescribeClientQuotas' filter: ``(entity type, match type 0 exact /
    1 default / 2 any, name)``; ``strict``: the entity has no other types."""
    out = []
    for entity, values in _index(section).items():
        names = dict(entity)
        ok = all(
            t in names and (m == 2 or (m == 1 and names[t] is None) or (m == 0 and names[t] == name))
            for t, m, name in components)
        if ok and (not strict or set(names) == {t for t, _, _ in components}):
            out.append((entity, values))
    return out
