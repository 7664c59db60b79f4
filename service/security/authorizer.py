"""Kafka's authorizer semantics (``StandardAuthorizer``) over the ACLs of the newest metadata.

``authorize(principal, host, operation, resource_type, name)``:

1. a principal in ``super.users`` may do anything;
2. the ACLs that apply to the resource are those of its type whose pattern matches
   the name: LITERAL equal to it, the LITERAL wildcard ``*``, or PREFIXED by a prefix
   of it; of those, the ones for this principal (or ``User:*``) and host (or ``*``);
3. a DENY for the operation (or ALL) wins over everything;
4. else an ALLOW for the operation, for ALL, or for an operation that implies it
   (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
   DESCRIBE_CONFIGS; implication applies to ALLOW only, as in Kafka), allows;
5. else, if no ACL at all applies to the resource (whoever it names),
   ``allow.everyone.if.no.acl.found`` decides; otherwise denied.

``authorize_by_resource_type`` is Kafka's check for "may do ``operation`` on some
resource of this type" (InitProducerId without a transactional id: WRITE on any topic).

The ACLs are indexed once per metadata revision (a snapshot is immutable); reads are
lock-free and thread-safe.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from service.security.acls import (
    WILDCARD,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    bindings_from_json,
)
from service.security.principal import KafkaPrincipal

__all__ = ["ACL_SECTION", "Authorizer", "build_authorizer", "is_authorizer_class"]

ACL_SECTION = "acls"
_AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "strata",
})
_IMPLIES: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


def is_authorizer_class(name: str) -> bool:
    """Whether ``authorizer.class.name`` names the ACL authorizer ('' is none; anything
    else is refused at start)."""
    return name in _AUTHORIZER_CLASSES


@dataclass(slots=True)
class _Index:
    revision: int
    literal: dict[tuple[ResourceType, str], list[AclBinding]] = field(default_factory=lambda: defaultdict(list))
    prefixed: dict[ResourceType, list[AclBinding]] = field(default_factory=lambda: defaultdict(list))
    by_type: dict[ResourceType, list[AclBinding]] = field(default_factory=lambda: defaultdict(list))


class Authorizer:
    """See the module docstring. ``revision()`` is the newest metadata's revision and
    ``section()`` its ``acls`` section (read only when the revision moved)."""

    def __init__(self, revision: Callable[[], int], section: Callable[[], Any], super_users: str | None,
                 allow_if_no_acl: bool) -> None:
        self._revision = revision
        self._section = section
        self.super_users = frozenset(
            KafkaPrincipal.parse(p.strip()) for p in (super_users or "").split(";") if p.strip())
        self.allow_if_no_acl = allow_if_no_acl
        self._index = _Index(-2)

    def _current(self) -> _Index:
        revision = self._revision()
        index = self._index
        if index.revision != revision:
            index = _Index(revision)
            for b in bindings_from_json(self._section()):
                index.by_type[b.resource_type].append(b)
                if b.pattern_type == PatternType.PREFIXED:
                    index.prefixed[b.resource_type].append(b)
                else:
                    index.literal[(b.resource_type, b.name)].append(b)
            self._index = index
        return index

    def _applicable(self, index: _Index, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(index.literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += index.literal.get((resource_type, WILDCARD), ())
        found += (b for b in index.prefixed.get(resource_type, ()) if name.startswith(b.name))
        return found

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        applicable = self._applicable(self._current(), resource_type, name)
        if not applicable:
            return self.allow_if_no_acl
        who = (str(principal), f"{principal.principal_type}:*")
        allowed = False
        implied = _IMPLIES.get(operation, frozenset({operation}))
        for b in applicable:
            if b.principal not in who or b.host not in (host, WILDCARD):
                continue
            if b.permission == PermissionType.DENY and b.operation in (operation, AclOperation.ALL):
                return False
            if b.permission == PermissionType.ALLOW and (b.operation == AclOperation.ALL or b.operation in implied):
                allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of ``resource_type``?"""
        if principal in self.super_users:
            return True
        bindings = self._current().by_type.get(resource_type, [])
        if not bindings and self.allow_if_no_acl:
            return True
        candidates = {b.name for b in bindings if b.permission == PermissionType.ALLOW
                      and b.operation in (operation, AclOperation.ALL)}
        return any(self.authorize(principal, host, operation, resource_type, name) for name in candidates)


def build_authorizer(config: Any, broker: Any) -> Authorizer | None:
    """The authorizer ``authorizer.class.name`` asks for (None when empty), reading the ACLs
    of the broker's metadata image. The inter-broker SASL user is a super user besides
    ``super.users`` (brokers must be allowed CLUSTER_ACTION on each other); with a
    PLAINTEXT or SSL inter-broker listener name its principal in ``super.users``, as in
    Kafka. ``ValueError`` for an authorizer Strata does not have."""
    name = config.get_str("authorizer.class.name")
    if not name:
        return None
    if not is_authorizer_class(name):
        raise ValueError(f"authorizer.class.name={name}: Strata's authorizer is Kafka's ACL authorizer; set "
                         "org.apache.kafka.metadata.authorizer.StandardAuthorizer, or nothing for no ACLs")
    image = broker.controller
    supers = config.get("super.users") or ""
    inter = broker.inter_broker
    if inter.sasl_mechanism and inter.username:
        supers = f"{supers};User:{inter.username}"

    def section() -> Any:
        return image.metadata.section(ACL_SECTION) if image.revision >= 0 else None

    return Authorizer(lambda: image.revision, section, supers, config.get_bool("allow.everyone.if.no.acl.found"))
