"""Authorized operations: what a client may do to a resource, as Kafka's 32-bit field.

Metadata (topics, and the cluster up to v10), DescribeCluster and DescribeGroups
answer, when the client asks (``include_*_authorized_operations``), a bit set of
:class:`AclOperation` codes (bit ``1 << code``). :func:`authorized_operations` is
the one place that computes it: with no authorizer configured (Strata has none
yet) every operation Kafka supports on that resource type is allowed, as in
Kafka's ``AuthHelper.authorizedOperations``; an authorizer (the ACL work) will
filter the same list per principal here, and every handler follows.

Pure functions; thread-safe.
"""

from __future__ import annotations

import enum

from service.handlers.context import RequestContext

__all__ = [
    "OPERATIONS_NOT_REQUESTED",
    "AclOperation",
    "ResourceType",
    "authorized_operations",
    "supported_operations",
]

#: The schema default (Integer.MIN_VALUE): the client did not ask.
OPERATIONS_NOT_REQUESTED = -(2**31)


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes (those with authorized operations)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes."""

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
    TWO_PHASE_COMMIT = 15


_Op = AclOperation
_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER,
         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset(
        {_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
    ),
    ResourceType.CLUSTER: frozenset(
        {_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
         _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_Op.DESCRIBE, _Op.WRITE, _Op.TWO_PHASE_COMMIT}),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations Kafka defines on ``resource_type`` (its ``AclEntry.supportedOperations``)."""
    return _SUPPORTED[resource_type]


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The bit set of operations the request's principal may do on the resource ``name``.

    No authorizer is configured, so that is every supported operation. ``ctx`` and
    ``name`` are what an authorizer needs (principal, listener, the resource).
    """
    del ctx, name  # every principal may do everything until an authorizer exists
    bits = 0
    for op in _SUPPORTED[resource_type]:
        bits |= 1 << op
    return bits
