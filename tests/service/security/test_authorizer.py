"""Kafka's authorizer semantics (StandardAuthorizer) and ACL filters, on ACL lists."""

from __future__ import annotations

import pytest

from service.security.acls import (
    AclBinding,
    AclFilter,
    PatternType,
    PermissionType,
    ResourceType,
    bindings_to_json,
    validate_binding,
)
from service.security.acls import AclOperation as Op
from service.security.authorizer import Authorizer
from service.security.principal import KafkaPrincipal

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
ALICE, BOB, ADMIN = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob"), KafkaPrincipal.user("admin")


def acl(rtype: ResourceType, name: str, op: Op, permission: PermissionType = ALLOW, pattern: PatternType = LIT,
        principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def authorizer(*acls: AclBinding, allow_if_none: bool = False, supers: str = "User:admin") -> Authorizer:
    return Authorizer(lambda: 1, lambda: bindings_to_json(acls), supers, allow_if_none)


def test_deny_wins_over_allow_whatever_the_pattern() -> None:
    a = authorizer(acl(T, "pay", Op.ALL, pattern=PRE), acl(T, "payroll", Op.READ, DENY))
    assert a.authorize(ALICE, "h", Op.READ, T, "payments")
    assert not a.authorize(ALICE, "h", Op.READ, T, "payroll")
    assert a.authorize(ALICE, "h", Op.WRITE, T, "payroll")  # the DENY is for READ only


def test_implied_operations_apply_to_allow_only() -> None:
    a = authorizer(acl(T, "t", Op.WRITE), acl(T, "u", Op.ALTER_CONFIGS), acl(T, "v", Op.READ, DENY),
                   acl(T, "v", Op.DESCRIBE))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "t")  # WRITE implies DESCRIBE
    assert not a.authorize(ALICE, "h", Op.READ, T, "t")
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T, "u")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "v")  # a DENY of READ does not deny DESCRIBE


def test_wildcards_hosts_and_super_users() -> None:
    a = authorizer(acl(T, "*", Op.READ, principal="User:*"), acl(G, "g", Op.READ, host="10.0.0.1"))
    assert a.authorize(BOB, "h", Op.READ, T, "anything")
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, G, "g")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, G, "g")
    assert a.authorize(ADMIN, "h", Op.ALTER, C, "kafka-cluster")  # super user


def test_a_resource_no_acl_names_follows_allow_everyone_if_no_acl_found() -> None:
    assert not authorizer(acl(T, "other", Op.READ)).authorize(ALICE, "h", Op.READ, T, "t")
    assert authorizer(acl(T, "other", Op.READ), allow_if_none=True).authorize(ALICE, "h", Op.READ, T, "t")
    # an ACL for someone else on the resource means it is not "no ACL found"
    assert not authorizer(acl(T, "t", Op.READ, principal="User:bob"), allow_if_none=True).authorize(
        ALICE, "h", Op.READ, T, "t")


def test_authorize_by_resource_type_for_idempotent_producers() -> None:
    assert authorizer(acl(T, "t", Op.WRITE)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not authorizer(acl(T, "t", Op.WRITE), acl(T, "t", Op.WRITE, DENY)).authorize_by_resource_type(
        ALICE, "h", Op.WRITE, T)
    assert not authorizer(acl(T, "t", Op.READ)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)


def test_filters_match_as_kafkas_acl_binding_filter() -> None:
    prefixed, literal, wildcard = acl(T, "pay", Op.READ, pattern=PRE), acl(T, "payroll", Op.READ), acl(T, "*", Op.READ)
    match = AclFilter(T, "payroll", PatternType.MATCH, None, None, Op.ANY, PermissionType.ANY)
    assert [match.matches(b) for b in (prefixed, literal, wildcard)] == [True, True, True]
    exact = AclFilter(T, "payroll", PatternType.ANY, None, None, Op.ANY, PermissionType.ANY)
    assert [exact.matches(b) for b in (prefixed, literal, wildcard)] == [False, True, False]
    assert not AclFilter(G, None, PatternType.ANY, None, None, Op.ANY, PermissionType.ANY).matches(literal)


@pytest.mark.parametrize(("binding", "reason"), [
    (acl(C, "other", Op.ALTER), "only valid name for the CLUSTER"),
    (acl(T, "t", Op.CLUSTER_ACTION), "not a valid operation for resource type TOPIC"),
    (acl(T, "t", Op.READ, principal="alice"), "Could not parse principal"),
    (acl(T, "t", Op.READ, pattern=PatternType.MATCH), "Invalid pattern type"),
])
def test_invalid_acls_are_refused_with_kafkas_reason(binding: AclBinding, reason: str) -> None:
    assert reason in (validate_binding(binding) or "")
