"""Authorized operations: what a client may do to a resource, as Kafka's 32-bit field.

Metadata (topics, and the cluster up to v10), DescribeCluster and DescribeGroups
answer, when the client asks (``include_*_authorized_operations``), a bit set of
:class:`AclOperation` codes (bit ``1 << code``). :func:`authorized_operations` is
the one place that computes it, as Kafka's ``AuthHelper.authorizedOperations``:
the operations Kafka supports on that resource type that the authorizer allows the
request's principal (all of them when no authorizer is configured).

Pure functions; thread-safe.
"""

from __future__ import annotations

from service.handlers.context import RequestContext
from service.security.acls import SUPPORTED_OPERATIONS, AclOperation, ResourceType

__all__ = [
    "OPERATIONS_NOT_REQUESTED",
    "AclOperation",
    "ResourceType",
    "authorized_operations",
    "supported_operations",
]

#: The schema default (Integer.MIN_VALUE): the client did not ask.
OPERATIONS_NOT_REQUESTED = -(2**31)


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations Kafka defines on ``resource_type`` (its ``AclEntry.supportedOperations``)."""
    return SUPPORTED_OPERATIONS[resource_type]


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The bit set of operations the request's principal may do on the resource ``name``:
    each supported operation the authorizer allows (all of them with no authorizer)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if ctx.allowed(op, resource_type, name):
            bits |= 1 << op
    return bits
