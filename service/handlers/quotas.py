"""Client quotas: DescribeClientQuotas (48) and AlterClientQuotas (49), as Kafka answers them.

Quotas live in the cluster metadata (section ``client_quotas``,
:mod:`service.quotas.entities`); AlterClientQuotas is a controller write (forwarded to
the active controller) and needs ALTER_CONFIGS on the cluster; DescribeClientQuotas is
answered from this broker's metadata and needs DESCRIBE_CONFIGS (the router checks
that one). Entities: ``user`` and ``client-id`` (a null name is ``<default>``); keys:
``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``; or ``ip`` alone,
key ``connection_creation_rate`` (KIP-612, :mod:`service.quotas.connections`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from common.errors import ErrorCode
from common.protocol.codec import build, response_module
from service.handlers.context import RequestContext
from service.quotas.entities import SECTION, alter_quotas, describe_quotas
from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["handle_alter_client_quotas", "handle_describe_client_quotas"]


def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(48, ctx.version)
    components = [(c.entity_type, int(c.match_type), c.match) for c in request.components]
    if any(m not in (0, 1, 2) for _, m, _ in components):
        return build(mod.DescribeClientQuotasResponse, throttle_time=0, error_code=ErrorCode.invalid_request,
                     error_message="Unknown match type", entries=None)
    found = describe_quotas(ctx.broker.controller.metadata.section(SECTION), components, bool(request.strict))
    entries = tuple(
        build(mod.EntryData,
              entity=tuple(build(mod.EntityData, entity_type=t, entity_name=n) for t, n in entity),
              values=tuple(build(mod.ValueData, key=k, value=v) for k, v in sorted(values.items())))
        for entity, values in found)
    return build(mod.DescribeClientQuotasResponse, throttle_time=0, error_code=ErrorCode.none, error_message=None,
                 entries=entries)


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(49, ctx.version)
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity],
                [(o.key, float(o.value), bool(o.remove)) for o in entry.ops]) for entry in request.entries]
    if not ctx.allowed(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        ctx.broker.metrics_error("AlterClientQuotas", ErrorCode.cluster_authorization_failed)
        results = [(ErrorCode.cluster_authorization_failed, "Not authorized to ALTER_CONFIGS the cluster")] * len(entries)
    else:
        validate_only = bool(request.validate_only)
        results = await asyncio.to_thread(
            ctx.broker.active_controller().alter_section, SECTION,
            lambda current: alter_quotas(current, entries, validate_only))
    return build(mod.AlterClientQuotasResponse, throttle_time=0, entries=tuple(
        build(mod.EntryData, error_code=code, error_message=message,
              entity=tuple(build(mod.EntityData, entity_type=t, entity_name=n) for t, n in entity))
        for (entity, _), (code, message) in zip(entries, results, strict=True)))
