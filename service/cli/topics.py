"""``strata topics create|list|describe|delete|alter|reassign``, in the manner of kafka-topics.sh.

Through confluent-kafka's AdminClient (CreateTopics, Metadata, DescribeConfigs,
IncrementalAlterConfigs, CreatePartitions, DeleteTopics); ``describe`` adds each
partition's local and remote log state from the broker's admin HTTP API when it
answers (``--admin-url``), and says so when it does not.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from service.cli import reassign
from service.cli.common import (
    CLIENT_ID,
    CLIENT_TIMEOUT_S,
    CliError,
    admin_client,
    base_config,
    bootstrap_parent,
    describe_exception,
    fetch_metadata,
    guarded,
    key_value,
    needs_subcommand,
    positive_int,
    topic_metadata,
    wait_for,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``topics`` to the ``strata`` CLI."""
    common = bootstrap_parent()

    topics = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics")
    topic_cmds = topics.add_subparsers(dest="topics_command", metavar="COMMAND")
    topics.set_defaults(func=needs_subcommand(topics))

    p = topic_cmds.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("name")
    p.add_argument("--partitions", type=positive_int, default=None,
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=positive_int, default=None,
                   help="replication factor (default: the broker's)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   type=key_value, help="topic config, repeatable")
    p.add_argument("--if-not-exists", action="store_true",
                   help="succeed if the topic already exists")
    p.set_defaults(func=guarded(_topics_create))

    p = topic_cmds.add_parser("list", parents=[common], help="list topics")
    p.set_defaults(func=guarded(_topics_list))

    p = topic_cmds.add_parser(
        "describe", parents=[common],
        help="partitions, leaders, offsets and non-default configs of topics")
    p.add_argument("names", nargs="*", metavar="NAME", help="topics (default: all)")
    p.add_argument("--admin-url", default=os.environ.get("STRATA_ADMIN_URL"), metavar="URL",
                   help="the broker's admin HTTP API, for tiering state "
                   "(default: $STRATA_ADMIN_URL or http://BOOTSTRAP_HOST:9644)")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", "--under-replicated", action="store_true",
                      dest="under_replicated",
                      help="only partitions whose in-sync replicas are fewer than their replicas")
    only.add_argument("--under-min-isr-partitions", action="store_true", dest="under_min_isr",
                      help="only partitions with fewer in-sync replicas than min.insync.replicas")
    only.add_argument("--unavailable-partitions", action="store_true", dest="unavailable",
                      help="only partitions with no leader")
    p.set_defaults(func=guarded(_topics_describe))

    p = topic_cmds.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=guarded(_topics_delete))

    p = topic_cmds.add_parser("alter", parents=[common],
                              help="add partitions or change topic configs")
    p.add_argument("name")
    p.add_argument("--partitions", type=positive_int, default=None,
                   help="new total number of partitions")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   type=key_value, dest="set_configs", help="set a config, repeatable")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="revert a config to its default, repeatable")
    p.set_defaults(func=guarded(_topics_alter))

    reassign.register(topic_cmds, common)


def _topics_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = admin_client(args)
    new = NewTopic(
        args.name,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=(args.replication_factor
                            if args.replication_factor is not None else -1),
        config=dict(args.config),
    )
    futures = admin.create_topics([new], request_timeout=CLIENT_TIMEOUT_S)
    if args.if_not_exists:
        try:
            futures[args.name].result(timeout=CLIENT_TIMEOUT_S + 5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return _exists_already(admin, args)
            raise
    else:
        wait_for(futures, args)
    print(f"created topic {args.name}", file=sys.stderr)
    return 0


def _exists_already(admin: Any, args: argparse.Namespace) -> int:
    """``create --if-not-exists`` of a topic that exists: say so, and what differs."""
    topic = topic_metadata(fetch_metadata(admin, args, args.name), args.name, args)
    count = len(topic.partitions)
    if args.partitions is not None and args.partitions != count:
        print(f"warning: topic {args.name} already exists with {count} partition(s), not the "
              f"{args.partitions} asked for; it was left as it is"
              + (f" (`strata topics alter {args.name} --partitions {args.partitions}` adds "
                 "partitions)" if args.partitions > count else ""),
              file=sys.stderr)
    else:
        print(f"topic {args.name} already exists ({count} partition(s)); nothing changed",
              file=sys.stderr)
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    md = fetch_metadata(admin, args)
    for name in sorted(md.topics):
        print(name)
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConfigResource,
        ConfigSource,
    )

    admin = admin_client(args)
    md = fetch_metadata(admin, args)
    names = list(args.names) or sorted(md.topics)
    topics = [topic_metadata(md, name, args) for name in names]

    configs: dict[str, dict[str, str | None]] = {}
    min_isr: dict[str, int] = {}
    if topics:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t.topic) for t in topics]
        futures = admin.describe_configs(resources, request_timeout=CLIENT_TIMEOUT_S)
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=CLIENT_TIMEOUT_S + 5)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal for the listing
                raise CliError(f"describe configs of {resource.name}: "
                               f"{describe_exception(exc, args)}") from None
            configs[resource.name] = {
                key: entry.value
                for key, entry in sorted(entries.items())
                # like kafka-topics --describe: only what was set on the topic itself
                if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            }
            min_isr[resource.name] = int(entries["min.insync.replicas"].value or 1) \
                if "min.insync.replicas" in entries else 1

    consumer = Consumer({**base_config(args.bootstrap_server, args.command_config),
                         "group.id": f"{CLIENT_ID}-describe",
                         "enable.auto.commit": False})
    unanswered = False
    try:
        filtering = args.under_replicated or args.under_min_isr or args.unavailable
        for topic in topics:
            partitions = sorted(topic.partitions.values(), key=lambda p: p.id)
            replication = len(partitions[0].replicas) if partitions else 0
            if filtering:  # like kafka-topics.sh: only the matching partitions, no topic line
                for part in partitions:
                    if _matches(args, part, min_isr.get(topic.topic, 1)):
                        print(f"\tTopic: {topic.topic}\tPartition: {part.id}\tLeader: "
                              f"{part.leader if part.leader >= 0 else 'none'}\t"
                              f"Replicas: {','.join(map(str, part.replicas))}\t"
                              f"Isr: {','.join(map(str, part.isrs))}")
                continue
            config_text = ",".join(
                f"{k}={'<sensitive>' if v is None else v}"
                for k, v in configs.get(topic.topic, {}).items())
            print(f"Topic: {topic.topic}\tPartitionCount: {len(partitions)}\t"
                  f"ReplicationFactor: {replication}\tConfigs: {config_text}")
            tiering = _tiering_state(args, topic.topic)
            for part in partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic.topic, part.id), timeout=CLIENT_TIMEOUT_S)
                print(f"\tTopic: {topic.topic}\tPartition: {part.id}\tLeader: {part.leader}\t"
                      f"Replicas: {','.join(map(str, part.replicas))}\t"
                      f"Isr: {','.join(map(str, part.isrs))}\t"
                      f"EarliestOffset: {low}\tLatestOffset: {high}"
                      + _tiering_columns(tiering.get(part.id) if tiering else None))
            unanswered |= tiering is None
    finally:
        consumer.close()
    if unanswered and not filtering:
        url = _admin_url(args)
        how = ("the --admin-url given" if args.admin_url else
               "the default: the bootstrap host on port 9644")
        print(f"note: no tiering columns (LocalStart, RemoteStart, bytes, UploadLag): no Strata "
              f"admin API answered at {url} ({how}). If the broker runs with "
              "`strata up --http HOST:PORT`, pass --admin-url http://HOST:PORT or set "
              "STRATA_ADMIN_URL=http://HOST:PORT.", file=sys.stderr)
    return 0


def _matches(args: argparse.Namespace, part: Any, min_isr: int) -> bool:
    """Whether a partition passes ``--under-replicated-partitions``,
    ``--under-min-isr-partitions`` or ``--unavailable-partitions``."""
    if args.unavailable:
        return bool(part.leader < 0)
    if args.under_min_isr:
        return len(part.isrs) < min_isr
    return len(part.isrs) < len(part.replicas)


def _admin_url(args: argparse.Namespace) -> str:
    if args.admin_url:
        return str(args.admin_url).rstrip("/")
    host = args.bootstrap_server.split(",")[0].rpartition(":")[0] or "localhost"
    return f"http://{host}:9644"


def _tiering_state(args: argparse.Namespace, topic: str) -> dict[int, dict[str, Any]] | None:
    """Per-partition tiering state from the broker's admin API, or None if it does not answer."""
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    url = f"{_admin_url(args)}/v1/topics/{urllib.parse.quote(topic, safe='')}/partitions"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            body = json.load(resp)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return {int(p["partition"]): p for p in body.get("partitions", [])}


def _tiering_columns(state: dict[str, Any] | None) -> str:
    if state is None:
        return ""
    remote_start = state["remote_log_start_offset"]
    return (f"\tLocalStart: {state['local_log_start_offset']}"
            f"\tRemoteStart: {'-' if remote_start is None else remote_start}"
            f"\tLocalBytes: {state['local_bytes']}\tRemoteBytes: {state['remote_bytes']}"
            f"\tUploadLag: {state['upload_lag_offsets']} offsets/{state['upload_lag_bytes']} bytes"
            + _cleaner_columns(state.get("cleaner")))


def _cleaner_columns(cleaner: dict[str, Any] | None) -> str:
    """A compacted partition's cleaning: which tier, the dirty ratio, the last cleaned offset."""
    if cleaner is None:
        return ""
    cleaned = cleaner["cleaned_up_to"]
    return (f"\tCleaner: {cleaner['tier']} {cleaner['state']}\tDirtyRatio: {cleaner['dirty_ratio']:.2f}"
            f"\tCleanedUpTo: {'-' if cleaned is None else cleaned}")


def _topics_delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    futures = admin.delete_topics(list(args.names), request_timeout=CLIENT_TIMEOUT_S)
    failures = []
    for name, future in futures.items():
        try:
            wait_for({name: future}, args, unknown_topic="nothing to delete "
                     "(`strata topics list` shows the topics)")
        except CliError as exc:
            failures.append(str(exc))
        else:
            print(f"deleted topic {name}", file=sys.stderr)
    if failures:
        raise CliError("; ".join(failures))
    return 0


def _topics_alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
    )

    if args.partitions is None and not args.set_configs and not args.delete_config:
        raise CliError("nothing to alter: give --partitions, --set or --delete-config")
    admin = admin_client(args)
    if args.set_configs or args.delete_config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in args.set_configs]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in args.delete_config]
        resource = ConfigResource(ConfigResource.Type.TOPIC, args.name,
                                  incremental_configs=entries)
        futures = admin.incremental_alter_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
        wait_for(futures, args)
        print(f"altered configs of topic {args.name}", file=sys.stderr)
    if args.partitions is not None:
        futures = admin.create_partitions([NewPartitions(args.name, args.partitions)],
                                          request_timeout=CLIENT_TIMEOUT_S)
        wait_for(futures, args)
        print(f"topic {args.name} now has {args.partitions} partitions", file=sys.stderr)
    return 0
