"""ACLs as Kafka models them: :class:`AclBinding` (a resource pattern and an access
control entry), filters (:class:`AclFilter`, what DescribeAcls and DeleteAcls match),
and the stored form, the metadata section ``acls``::

    [{"resource_type": "TOPIC", "name": "orders", "pattern_type": "PREFIXED",
      "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}]

(sorted, no duplicates; docs/adr/0021-security-in-the-cluster-metadata.md). The
enum codes are Kafka's wire codes. Authorization over these is
:mod:`service.security.authorizer`.

Frozen values and pure functions; thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "SUPPORTED_OPERATIONS",
    "AclBinding",
    "AclFilter",
    "AclOperation",
    "PatternType",
    "PermissionType",
    "ResourceType",
    "bindings_from_json",
    "bindings_to_json",
    "validate_binding",
]

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_Op = AclOperation
#: Kafka's AclEntry.supportedOperations: what an ACL on each resource type may name
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
                                   _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
                                     _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_Op.DESCRIBE, _Op.WRITE, _Op.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({_Op.DESCRIBE}),
    ResourceType.USER: frozenset({_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS}),
}


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def to_json(self) -> dict[str, str]:
        out: dict[str, Any] = asdict(self)
        return {k: (v.name if isinstance(v, enum.Enum) else v) for k, v in out.items()}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> AclBinding:
        return cls(ResourceType[data["resource_type"]], data["name"], PatternType[data["pattern_type"]],
                   data["principal"], data["host"], AclOperation[data["operation"]],
                   PermissionType[data["permission"]])


def validate_binding(b: AclBinding) -> str | None:
    """Why Kafka refuses to create ``b`` (INVALID_REQUEST), or None."""
    if b.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return f"Invalid resource type {b.resource_type.name}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {b.pattern_type.name}: use LITERAL or PREFIXED"
    if b.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {b.operation.name}"
    if b.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permission type {b.permission.name}"
    if not b.name:
        return "Resource name must not be empty"
    if b.resource_type == ResourceType.CLUSTER and (b.name != CLUSTER_NAME or b.pattern_type != PatternType.LITERAL):
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, who = b.principal.partition(":")
    if not sep or not kind or not who:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal type from the principal name)"
    if not b.host:
        return "Host must not be empty (use * for any host)"
    if b.operation != AclOperation.ALL and b.operation not in SUPPORTED_OPERATIONS[b.resource_type]:
        return f"{b.operation.name} is not a valid operation for resource type {b.resource_type.name}"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls/DeleteAcls's filter; None fields match anything (Kafka's AclBindingFilter)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def problem(self) -> str | None:
        if PatternType.UNKNOWN in (self.pattern_type,) or ResourceType.UNKNOWN == self.resource_type:
            return "The filter has an UNKNOWN element"
        if self.operation == AclOperation.UNKNOWN or self.permission == PermissionType.UNKNOWN:
            return "The filter has an UNKNOWN element"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation not in (AclOperation.ANY, b.operation):
            return False
        return self.permission in (PermissionType.ANY, b.permission)

    def _pattern_matches(self, b: AclBinding) -> bool:
        if self.pattern_type == PatternType.ANY:
            return self.name is None or self.name == b.name
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.name in (self.name, WILDCARD)
            return self.name.startswith(b.name)
        return self.pattern_type == b.pattern_type and (self.name is None or self.name == b.name)


def bindings_from_json(section: Iterable[dict[str, str]] | None) -> list[AclBinding]:
    return [AclBinding.from_json(item) for item in section or ()]


def bindings_to_json(bindings: Iterable[AclBinding]) -> list[dict[str, str]]:
    return [b.to_json() for b in sorted(set(bindings))]
