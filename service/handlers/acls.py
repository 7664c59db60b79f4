"""ACLs: CreateAcls (30), DescribeAcls (29), DeleteAcls (31), as Kafka answers them.

The ACLs live in the cluster metadata (section ``acls``,
:mod:`service.security.acls`); CreateAcls and DeleteAcls are controller writes
(forwarded to the active controller), DescribeAcls is answered from this broker's
metadata. With no authorizer configured every request answers ``SECURITY_DISABLED``.
Creating and deleting need ALTER on the cluster, describing DESCRIBE (the router
checks that one); an invalid ACL is ``INVALID_REQUEST`` with Kafka's reason.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from common.errors import ErrorCode
from common.protocol.codec import build, response_module
from service.handlers.context import RequestContext
from service.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    bindings_from_json,
    bindings_to_json,
    validate_binding,
)
from service.security.authorizer import ACL_SECTION

__all__ = ["handle_create_acls", "handle_delete_acls", "handle_describe_acls"]

_DISABLED = "No Authorizer is configured on the broker (authorizer.class.name)"
_DENIED = "Cluster authorization failed (ALTER on the cluster is needed)"


def _filter(f: Any) -> AclFilter:
    """A request's filter; a code Kafka does not have becomes UNKNOWN (then INVALID_REQUEST)."""
    return AclFilter(_enum(ResourceType, f.resource_type_filter, ResourceType.UNKNOWN), f.resource_name_filter,
                     _enum(PatternType, getattr(f, "pattern_type_filter", 3), PatternType.UNKNOWN),
                     f.principal_filter, f.host_filter, _enum(AclOperation, f.operation, AclOperation.UNKNOWN),
                     _enum(PermissionType, f.permission_type, PermissionType.UNKNOWN))


def _enum(kind: Any, value: int, default: Any) -> Any:
    try:
        return kind(value)
    except ValueError:
        return default


def _stored(ctx: RequestContext) -> list[AclBinding]:
    return bindings_from_json(ctx.broker.controller.metadata.section(ACL_SECTION))


def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(29, ctx.version)
    if ctx.authorizer is None:
        return build(mod.DescribeAclsResponse, throttle_time=0, error_code=ErrorCode.security_disabled,
                     error_message=_DISABLED, resources=())
    wanted = _filter(request)
    problem = wanted.problem()
    if problem is not None:
        return build(mod.DescribeAclsResponse, throttle_time=0, error_code=ErrorCode.invalid_request,
                     error_message=problem, resources=())
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = defaultdict(list)
    for b in _stored(ctx):
        if wanted.matches(b):
            by_resource[(b.resource_type, b.name, b.pattern_type)].append(b)
    resources = tuple(
        build(mod.DescribeAclsResource, resource_type=rtype, resource_name=name, pattern_type=ptype,
              acls=tuple(build(mod.AclDescription, principal=b.principal, host=b.host, operation=b.operation,
                               permission_type=b.permission) for b in acls))
        for (rtype, name, ptype), acls in sorted(by_resource.items()))
    return build(mod.DescribeAclsResponse, throttle_time=0, error_code=ErrorCode.none, error_message=None,
                 resources=resources)


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(30, ctx.version)
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[tuple[int, AclBinding]] = []
    for i, c in enumerate(request.creations):
        if ctx.authorizer is None:
            results.append((ErrorCode.security_disabled, _DISABLED))
            continue
        if not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            results.append((ErrorCode.cluster_authorization_failed, _DENIED))
            continue
        binding = AclBinding(
            _enum(ResourceType, c.resource_type, ResourceType.UNKNOWN), c.resource_name,
            _enum(PatternType, getattr(c, "resource_pattern_type", 3), PatternType.UNKNOWN), c.principal, c.host,
            _enum(AclOperation, c.operation, AclOperation.UNKNOWN),
            _enum(PermissionType, c.permission_type, PermissionType.UNKNOWN))
        reason = validate_binding(binding)
        results.append((ErrorCode.invalid_request, reason) if reason else (ErrorCode.none, None))
        if reason is None:
            valid.append((i, binding))
    if valid:
        def change(current: Any) -> tuple[Any, None]:
            return bindings_to_json([*bindings_from_json(current), *(b for _, b in valid)]), None

        await asyncio.to_thread(ctx.broker.active_controller().alter_section, ACL_SECTION, change)
    for code, _ in results:
        if code != ErrorCode.none:
            ctx.broker.metrics_error("CreateAcls", code)
    return build(mod.CreateAclsResponse, throttle_time=0, results=tuple(
        build(mod.AclCreationResult, error_code=code, error_message=message) for code, message in results))


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(31, ctx.version)
    filters = [_filter(f) for f in request.filters]
    refused: ErrorCode | None = None
    if ctx.authorizer is None:
        refused = ErrorCode.security_disabled
    elif not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = ErrorCode.cluster_authorization_failed
    if refused is not None:
        ctx.broker.metrics_error("DeleteAcls", refused)
        message = _DISABLED if refused == ErrorCode.security_disabled else _DENIED
        return build(mod.DeleteAclsResponse, throttle_time=0, filter_results=tuple(
            build(mod.DeleteAclsFilterResult, error_code=refused, error_message=message, matching_acls=())
            for _ in filters))

    def change(current: Any) -> tuple[Any, list[list[AclBinding] | str]]:
        stored = bindings_from_json(current)
        matched: list[list[AclBinding] | str] = []
        for f in filters:
            problem = f.problem()
            matched.append(problem if problem else [b for b in stored if f.matches(b)])
        gone = {b for m in matched if not isinstance(m, str) for b in m}
        return bindings_to_json(b for b in stored if b not in gone), matched

    matched = await asyncio.to_thread(ctx.broker.active_controller().alter_section, ACL_SECTION, change)
    results = []
    for m in matched:
        if isinstance(m, str):
            results.append(build(mod.DeleteAclsFilterResult, error_code=ErrorCode.invalid_request, error_message=m,
                                 matching_acls=()))
            continue
        results.append(build(mod.DeleteAclsFilterResult, error_code=ErrorCode.none, error_message=None,
                             matching_acls=tuple(
            build(mod.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                  resource_type=b.resource_type, resource_name=b.name, pattern_type=b.pattern_type,
                  principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
            for b in m)))
    return build(mod.DeleteAclsResponse, throttle_time=0, filter_results=tuple(results))
