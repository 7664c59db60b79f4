"""``strata acls``: ACLs as ``kafka-acls.sh`` manages them.

    strata acls --add --allow-principal User:alice --operation Read --operation Describe --topic orders
    strata acls --add --deny-principal User:bob --operation Write --topic pay --resource-pattern-type prefixed
    strata acls --add --allow-principal User:app --consumer --topic orders --group app
    strata acls --list [--topic orders] [--principal User:alice]
    strata acls --remove --allow-principal User:alice --operation Read --topic orders

One binding per principal x host x operation x resource (``--topic``, ``--group``,
``--transactional-id``, ``--cluster``; each repeatable); ``--producer`` is WRITE,
DESCRIBE and CREATE on the topics, ``--consumer`` READ and DESCRIBE on them and READ
on the groups, as in kafka-acls.sh. Hosts default to ``*``. ``--list`` and
``--remove`` match with the same options (left out: any), the pattern type defaulting
to LITERAL for ``--add`` and ANY otherwise.
"""

from __future__ import annotations

import argparse
import sys
from itertools import product
from typing import Any

from service.cli.common import CliError, admin_client, bootstrap_parent, guarded

__all__ = ["register"]

_OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
               "DescribeConfigs", "AlterConfigs", "IdempotentWrite")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``acls`` to the ``strata`` CLI."""
    p = subparsers.add_parser("acls", parents=[bootstrap_parent()], help="add, list and remove ACLs (kafka-acls.sh)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove the ACLs that match")
    action.add_argument("--list", action="store_true", help="list the ACLs that match")
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL", help="e.g. User:alice")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--principal", action="append", default=[], help="--list: only ACLs of this principal")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default *")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default *")
    p.add_argument("--operation", action="append", default=[], choices=_OPERATIONS, type=_operation_name)
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=None, type=str.upper,
                   choices=("ANY", "MATCH", "LITERAL", "PREFIXED"))
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on the topics")
    p.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on the groups")
    p.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh compatibility")
    p.set_defaults(func=guarded(_acls))


def _operation_name(text: str) -> str:
    for op in _OPERATIONS:
        if op.lower() == text.lower().replace("_", ""):
            return op
    return text


def _enum_op(name: str) -> Any:
    from confluent_kafka.admin import AclOperation  # type: ignore[attr-defined]

    return AclOperation[{"ClusterAction": "CLUSTER_ACTION", "DescribeConfigs": "DESCRIBE_CONFIGS",
                         "AlterConfigs": "ALTER_CONFIGS", "IdempotentWrite": "IDEMPOTENT_WRITE"}.get(name, name.upper())]


def _resources(args: argparse.Namespace) -> list[tuple[Any, str, list[str]]]:
    """(resource type, name, operations) of the options."""
    from confluent_kafka.admin import ResourceType  # type: ignore[attr-defined]

    out: list[tuple[Any, str, list[str]]] = []
    for topic in args.topic:
        ops = list(args.operation)
        ops += ["Write", "Describe", "Create"] if args.producer else []
        ops += ["Read", "Describe"] if args.consumer else []
        out.append((ResourceType.TOPIC, topic, ops))
    for group in args.group:
        out.append((ResourceType.GROUP, group, list(args.operation) + (["Read"] if args.consumer else [])))
    for tid in args.transactional_id:
        out.append((ResourceType.TRANSACTIONAL_ID, tid, list(args.operation)))
    if args.cluster:
        out.append((ResourceType.BROKER, "kafka-cluster", list(args.operation)))
    return out


def _acls(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclBindingFilter,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    client = admin_client(args)
    default_pattern = "LITERAL" if args.add else "ANY"
    pattern = ResourcePatternType[args.resource_pattern_type or default_pattern]
    resources = _resources(args)
    if args.list:
        anything = (_enum_op("Any"), AclPermissionType.ANY)
        filters = [AclBindingFilter(rtype, name, pattern, None, None, *anything)  # type: ignore[arg-type]
                   for rtype, name, _ in resources]
        filters = filters or [AclBindingFilter(ResourceType.ANY, None, pattern, None, None, *anything)]  # type: ignore[arg-type]
        return _list(client, filters, args)
    grants = [(p, AclPermissionType.ALLOW, h) for p, h in product(args.allow_principal, args.allow_host or ["*"])]
    grants += [(p, AclPermissionType.DENY, h) for p, h in product(args.deny_principal, args.deny_host or ["*"])]
    if not resources or not grants or not all(ops for _, _, ops in resources):
        raise CliError("give a resource (--topic, --group, --transactional-id, --cluster), a principal "
                       "(--allow-principal, --deny-principal) and an --operation (or --producer/--consumer)")
    bindings = [(rtype, name, principal, host, op, permission)
                for rtype, name, ops in resources for principal, permission, host in grants for op in dict.fromkeys(ops)]
    if args.add:
        futures = client.create_acls([AclBinding(rtype, name, pattern, principal, host, _enum_op(op), permission)
                                      for rtype, name, principal, host, op, permission in bindings])
        _wait(futures, args)
        for b in futures:
            print(f"added: {_describe(b)}")
        return 0
    futures = client.delete_acls([AclBindingFilter(rtype, name, pattern, principal, host, _enum_op(op), permission)
                                  for rtype, name, principal, host, op, permission in bindings])
    removed = [b for f in _wait(futures, args) for b in f]
    for b in removed:
        print(f"removed: {_describe(b)}")
    return 0


def _wait(futures: dict[Any, Any], args: argparse.Namespace) -> list[Any]:
    from confluent_kafka import KafkaException

    out = []
    for future in futures.values():
        try:
            out.append(future.result(timeout=30))
        except KafkaException as exc:
            raise CliError(f"the broker refused: {exc.args[0].str()}") from None
    return out


def _list(client: Any, filters: list[Any], args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    seen = set()
    for f in filters:
        try:
            found = client.describe_acls(f).result(timeout=30)
        except KafkaException as exc:
            raise CliError(f"the broker refused: {exc.args[0].str()}") from None
        for b in found:
            if args.principal and b.principal not in args.principal:
                continue
            text = _describe(b)
            if text not in seen:
                seen.add(text)
                print(text)
    if not seen:
        print("no ACLs match", file=sys.stderr)
    return 0


def _describe(b: Any) -> str:
    return (f"{b.restype.name}:{b.resource_pattern_type.name}:{b.name} {b.permission_type.name} "
            f"{b.principal} from {b.host} to {b.operation.name}")
