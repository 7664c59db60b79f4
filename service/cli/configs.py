"""``strata configs``: dynamic broker configs and group configs, as ``kafka-configs.sh
--entity-type brokers|groups`` sets them.

    strata configs --entity-type brokers --entity-default --alter --add-config max.connections.per.ip=100
    strata configs --entity-type brokers --entity-default --alter \
        --add-config 'max.connections.per.ip.overrides=[10.0.0.7:500,batch-host:50]'
    strata configs --entity-type brokers --entity-name 2 --alter --delete-config max.connections
    strata configs --entity-type brokers --entity-name 1 --describe [--all]
    strata configs --entity-type groups --entity-name payments --alter --add-config consumer.session.timeout.ms=50000
    strata configs --entity-type groups --entity-name payments --describe

``--entity-default`` is the cluster-wide default every broker takes unless it has its
own value (which librdkafka and kafka-python cannot name: this command speaks
IncrementalAlterConfigs and DescribeConfigs through kafka-python's protocol classes).
What may change at run time: docs/operations.md ("Connection limits"); topic configs
are ``strata topics alter``'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.common import CliError, guarded
from service.cli.quotas import kafka_configs_parser, kafka_python_admin

__all__ = ["parse_add_config", "register"]

_BROKER, _GROUP = 4, 32
_SET, _DELETE = 0, 1
_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 8: "GROUP_CONFIG"}
#: the config sources --describe shows without --all: the values set for the resource itself
_OWN = {_BROKER: (2, 3), _GROUP: (8,)}


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``configs`` to the ``strata`` CLI."""
    p = kafka_configs_parser(subparsers, "configs", "dynamic broker configs and group configs "
                             "(kafka-configs.sh --entity-type brokers|groups)")
    p.add_argument("--entity-type", required=True, choices=["brokers", "groups"])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--entity-name", metavar="BROKER_ID|GROUP", help="one broker's (or one group's) own configs")
    which.add_argument("--entity-default", action="store_true", help="the cluster-wide default")
    p.add_argument("--add-config", default="", metavar="K=V,...")
    p.add_argument("--delete-config", default="", metavar="K,...")
    p.add_argument("--all", action="store_true", help="--describe every config, not only the dynamic ones")
    p.set_defaults(func=guarded(_configs))


def _configs(args: argparse.Namespace) -> int:
    resource = "" if args.entity_default else str(args.entity_name)
    kind = _GROUP if args.entity_type == "groups" else _BROKER
    if kind == _GROUP and not resource:
        raise CliError("group configs are per group: --entity-name GROUP (there is no group default)")
    if kind == _BROKER and resource and not (resource.isascii() and resource.isdigit()):
        raise CliError(f"--entity-name is a broker id, not {resource!r}")
    # a broker's own configs are asked of that broker; a group's, of any
    node = int(resource) if resource and kind == _BROKER else None
    admin = kafka_python_admin(args)
    try:
        if args.describe:
            _describe(admin, kind, resource, node, args.all)
            return 0
        _alter(admin, kind, resource, node, args.add_config, args.delete_config)
        print("configs updated")
        return 0
    finally:
        admin.close()


def parse_add_config(text: str) -> list[tuple[str, str]]:
    """``--add-config`` as kafka-configs.sh reads it: ``K=V`` pairs split on commas, a value
    with commas of its own in brackets (``max.connections.per.ip.overrides=[10.0.0.1:5,h:7]``)."""
    pairs, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            pair = text[start:i].strip()
            start = i + 1
            if not pair:
                continue
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise CliError(f"--add-config takes K=V, got {pair!r}")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            pairs.append((key.strip(), value))
    if depth:
        raise CliError(f"--add-config has an unclosed '[': {text!r}")
    return pairs


def _send(admin: Any, request: Any, node: int | None) -> Any:
    return admin._manager.run(admin._manager.send, request, node)


def _alter(admin: Any, kind: int, resource: str, node: int | None, add: str, delete: str) -> None:
    from kafka.protocol.admin import IncrementalAlterConfigsRequest as Request

    ops = [Request.AlterConfigsResource.AlterableConfig(name=key, config_operation=_SET, value=value)
           for key, value in parse_add_config(add)]
    ops += [Request.AlterConfigsResource.AlterableConfig(name=k.strip(), config_operation=_DELETE, value=None)
            for k in filter(None, delete.split(","))]
    if not ops:
        raise CliError("--alter needs --add-config or --delete-config")
    answer = _send(admin, Request(resources=[Request.AlterConfigsResource(
        resource_type=kind, resource_name=resource, configs=ops)], validate_only=False), node)
    for result in answer.responses:
        if result.error_code:
            raise CliError(f"the broker refused: {result.error_message} (error {result.error_code})")


def _describe(admin: Any, kind: int, resource: str, node: int | None, everything: bool) -> None:
    from kafka.protocol.admin import DescribeConfigsRequest as Request

    answer = _send(admin, Request(resources=[Request.DescribeConfigsResource(
        resource_type=kind, resource_name=resource, configuration_keys=None)], include_synonyms=True), node)
    (result,) = answer.results
    if result.error_code:
        raise CliError(f"the broker refused: {result.error_message} (error {result.error_code})")
    who = f"group {resource}" if kind == _GROUP else "the cluster default" if not resource else f"broker {resource}"
    print(f"{'Configs' if everything else 'Dynamic configs'} for {who}:")
    for entry in sorted(result.configs, key=lambda e: e.name):
        if not everything and entry.config_source not in _OWN[kind]:
            continue
        value = "(sensitive)" if entry.is_sensitive else entry.value
        synonyms = ", ".join(f"{_SOURCES.get(s.source, s.source)}:{s.name}={s.value}" for s in entry.synonyms or ())
        print(f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}")
