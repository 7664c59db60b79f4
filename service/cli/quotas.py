"""``strata quotas``: client quotas as ``kafka-configs.sh --entity-type users|clients|ips`` sets them.

    strata quotas --alter --entity-type users --entity-name alice --add-config producer_byte_rate=1048576
    strata quotas --alter --entity-type users --entity-default --entity-type clients --entity-name app \\
        --add-config consumer_byte_rate=2097152,request_percentage=50
    strata quotas --alter --entity-type users --entity-name alice --delete-config producer_byte_rate
    strata quotas --alter --entity-type ips --entity-name 10.0.0.7 --add-config connection_creation_rate=20
    strata quotas --describe [--entity-type users [--entity-name alice | --entity-default]]

Each ``--entity-type`` takes the ``--entity-name`` or ``--entity-default`` after it.
librdkafka has no client quota API, so this command speaks DescribeClientQuotas and
AlterClientQuotas through kafka-python (``--command-config`` is translated from
librdkafka's property names).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from service.cli.common import CLIENT_ID, CLIENT_TIMEOUT_S, CliError, bootstrap_parent, guarded
from service.cli.up_options import parse_properties

__all__ = ["kafka_configs_parser", "kafka_python_admin", "register"]

_TYPES = {"users": "user", "clients": "client-id", "ips": "ip", "user": "user", "client-id": "client-id", "ip": "ip"}
_KAFKA_PYTHON = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
                 "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
                 "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
                 "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile"}


class _Entity(argparse.Action):
    """--entity-type T then --entity-name N or --entity-default, in order."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        entities = list(getattr(namespace, "entities", None) or [])
        if option == "--entity-type":
            if values not in _TYPES:
                raise argparse.ArgumentError(self, f"entity type must be users, clients or ips, not {values!r}")
            entities.append([_TYPES[values], ...])
        elif not entities or entities[-1][1] is not ...:
            raise argparse.ArgumentError(self, f"{option} goes after an --entity-type")
        else:
            entities[-1][1] = None if option == "--entity-default" else values
        namespace.entities = entities


def kafka_configs_parser(subparsers: argparse._SubParsersAction[Any], name: str, what: str) -> Any:
    """A sub-command taking ``--alter`` or ``--describe``, as kafka-configs.sh does."""
    p = subparsers.add_parser(name, parents=[bootstrap_parent()], help=what)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    return p


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``quotas`` to the ``strata`` CLI."""
    p = kafka_configs_parser(subparsers, "quotas",
                             "client quotas by user and client id, connection quotas by IP (kafka-configs.sh)")
    p.add_argument("--entity-type", action=_Entity, dest="entities", metavar="users|clients|ips")
    p.add_argument("--entity-name", action=_Entity, dest="entities", metavar="NAME")
    p.add_argument("--entity-default", action=_Entity, dest="entities", nargs=0)
    p.add_argument("--add-config", default="", metavar="K=V,...",
                   help="producer_byte_rate, consumer_byte_rate, request_percentage; for ips: "
                        "connection_creation_rate")
    p.add_argument("--delete-config", default="", metavar="K,...")
    p.set_defaults(func=guarded(_quotas), entities=None)


def kafka_python_admin(args: argparse.Namespace) -> Any:
    """A kafka-python admin client (``--command-config`` translated from librdkafka names)."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    conf: dict[str, Any] = {}
    if args.command_config:
        try:
            with open(args.command_config, encoding="utf-8") as f:
                props = parse_properties(f.read())
        except (OSError, ValueError) as exc:
            raise CliError(f"--command-config {args.command_config}: {exc}") from None
        conf = {_KAFKA_PYTHON[k]: v for k, v in props.items() if k in _KAFKA_PYTHON}
    try:
        return KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id=CLIENT_ID,
                                request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000), **conf)
    except KafkaError as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {exc}") from None


def _quotas(args: argparse.Namespace) -> int:
    from kafka.protocol.admin.client_quotas import (
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )

    named = [(t, n) for t, n in args.entities or [] if n is not ...]
    if args.alter and len(named) != len(args.entities or []):
        raise CliError("each --entity-type needs an --entity-name or --entity-default")
    admin = kafka_python_admin(args)
    try:
        if args.describe:  # a type without a name: every entity of that type (match type 2)
            components = [DescribeClientQuotasRequest.ComponentData(
                entity_type=t, match_type=2 if n is ... else 1 if n is None else 0,
                match=None if n is ... else n) for t, n in args.entities or []]
            answer = admin._manager.run(admin._manager.send, DescribeClientQuotasRequest(components=components,
                                                                                         strict=False))
            if answer.error_code:
                raise CliError(f"the broker refused: {answer.error_message} (error {answer.error_code})")
            for entry in answer.entries:
                who = ", ".join(f"{e.entity_type}={e.entity_name if e.entity_name is not None else '<default>'}"
                                for e in entry.entity)
                values = ", ".join(f"{v.key}={v.value:g}" for v in entry.values)
                print(f"{who}\t{values}")
            return 0
        if not named:
            raise CliError("--alter needs --entity-type with --entity-name or --entity-default")
        ops = []
        for pair in filter(None, args.add_config.split(",")):
            key, sep, value = pair.partition("=")
            if not sep:
                raise CliError(f"--add-config takes K=V, got {pair!r}")
            ops.append(AlterClientQuotasRequest.EntryData.OpData(key=key.strip(), value=float(value), remove=False))
        ops += [AlterClientQuotasRequest.EntryData.OpData(key=k.strip(), value=0.0, remove=True)
                for k in filter(None, args.delete_config.split(","))]
        entry = AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in named],
            ops=ops)
        answer = admin._manager.run(admin._manager.send, AlterClientQuotasRequest(entries=[entry], validate_only=False))
        for result in answer.entries:
            if result.error_code:
                raise CliError(f"the broker refused: {result.error_message} (error {result.error_code})")
        print("quotas updated")
        return 0
    finally:
        admin.close()
