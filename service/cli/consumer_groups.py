"""`strata groups list|describe|reset|delete`, in the manner of kafka-consumer-groups.sh.

Like :mod:`service.cli.common` these talk the Kafka protocol through
confluent-kafka's AdminClient (ListGroups, ConsumerGroupDescribe then
DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups), so they
work against any Kafka-compatible broker and show groups of both protocols
(classic, and consumer: KIP-848, with each member's target assignment while it
reconciles), and every failure is one line on stderr with exit code 1 (the
error handling is shared with those commands).

``reset`` refuses to touch a group that has live members (their next commit
would undo the reset, as Kafka's tool warns); ``--dry-run`` prints the plan.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from collections.abc import Sequence
from typing import Any

from service.cli.common import (
    CLIENT_TIMEOUT_S,
    CliError,
    admin_client,
    bootstrap_parent,
    describe_exception,
    fetch_metadata,
    guarded,
    needs_subcommand,
    non_negative_int,
    topic_metadata,
    wait_for,
)

__all__ = ["register"]

_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``groups`` (list, describe, reset, delete) to the ``strata`` CLI."""
    common = bootstrap_parent()
    groups = subparsers.add_parser("groups", help="list, describe, reset, delete consumer groups")
    cmds = groups.add_subparsers(dest="groups_command", metavar="COMMAND")
    groups.set_defaults(func=needs_subcommand(groups))

    p = cmds.add_parser("list", parents=[common], help="list consumer groups")
    p.add_argument("--state", action="store_true", help="print each group's state too")
    p.add_argument("--type", action="store_true",
                   help="print each group's type too (classic, or consumer: KIP-848)")
    p.set_defaults(func=guarded(_groups_list))

    p = cmds.add_parser("describe", parents=[common],
                        help="members, assignment, committed offsets and lag of a group")
    p.add_argument("group")
    p.set_defaults(func=guarded(_groups_describe))

    p = cmds.add_parser("reset", parents=[common],
                        help="move an inactive group's committed offsets")
    p.add_argument("group")
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                   help="topic (optionally some partitions) to reset, repeatable")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=non_negative_int, metavar="N")
    to.add_argument("--to-datetime", type=_datetime, metavar="ISO",
                    help="e.g. 2024-05-01T12:00:00Z (no zone: local time)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(func=guarded(_groups_reset))

    p = cmds.add_parser("delete", parents=[common], help="delete inactive groups and their offsets")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.set_defaults(func=guarded(_groups_delete))


def _datetime(text: str) -> int:
    """ISO 8601 → epoch milliseconds (local time when no zone is given)."""
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date-time: {text!r}") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


# --------------------------------------------------------------------------- helpers


def _result(future: Any, args: argparse.Namespace, what: str) -> Any:
    try:
        return future.result(timeout=CLIENT_TIMEOUT_S + 5)
    except TimeoutError:
        raise CliError(f"no answer from {args.bootstrap_server} about {what}") from None
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        raise CliError(f"{what}: {describe_exception(exc, args)}") from None


def _describe(admin: Any, args: argparse.Namespace, group: str) -> Any:
    futures = admin.describe_consumer_groups([group], request_timeout=CLIENT_TIMEOUT_S)
    return _result(futures[group], args, f"group {group!r}")


def _committed(admin: Any, args: argparse.Namespace, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=CLIENT_TIMEOUT_S)
    result = _result(futures[group], args, f"offsets of group {group!r}")
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset != _NO_OFFSET}


def _list_offsets(admin: Any, args: argparse.Namespace, partitions: Sequence[tuple[str, int]],
                  spec: Any) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                 request_timeout=CLIENT_TIMEOUT_S)
    return {(tp.topic, tp.partition): _result(f, args, f"offsets of {tp.topic}/{tp.partition}").offset
            for tp, f in futures.items()}


def _state(description: Any) -> str:
    names = {"PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance"}
    name = description.state.name
    return str(names.get(name, name.capitalize()))


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


# --------------------------------------------------------------------------- commands


def _groups_list(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    result = _result(admin.list_consumer_groups(request_timeout=CLIENT_TIMEOUT_S), args,
                     "the group list")
    if not result.valid:
        print(f"no consumer groups on {args.bootstrap_server}: a group appears once a consumer "
              "joins it (`strata consume TOPIC --group NAME`)", file=sys.stderr)
    for listing in sorted(result.valid, key=lambda g: g.group_id):
        columns = [listing.group_id]
        if args.state:
            columns.append(listing.state.name.capitalize())
        if args.type:
            columns.append(_type(listing))
        print("\t".join(columns))
    return 0


def _type(described: Any) -> str:
    """``classic`` or ``consumer`` (the KIP-848 protocol); ``-`` when the broker does not say."""
    kind = getattr(described, "type", None)
    name = getattr(kind, "name", "UNKNOWN")
    return "-" if name == "UNKNOWN" else str(name).lower()


def _partitions(assignment: Any) -> set[tuple[str, int]]:
    if assignment is None:
        return set()
    return {(tp.topic, tp.partition) for tp in assignment.topic_partitions}


def _groups_describe(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

    OffsetSpec: Any = _OffsetSpec  # untyped in confluent-kafka

    admin = admin_client(args)
    description = _describe(admin, args, args.group)
    committed = _committed(admin, args, args.group)
    if _state(description) == "Dead" and not committed:
        raise CliError(f"consumer group {args.group!r} does not exist (no members, no committed "
                       "offsets): `strata groups list` shows the groups; a group appears once a "
                       f"consumer joins it, e.g. `strata consume TOPIC --group {args.group}`")
    owner: dict[tuple[str, int], Any] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owner[(tp.topic, tp.partition)] = member
    partitions = sorted(set(committed) | set(owner))
    # Only partitions that exist have a log end: a topic deleted under a group (or
    # an assignment not yet rebalanced away) shows "-" instead of failing the command.
    md = fetch_metadata(admin, args)
    hosted = [(t, p) for t, p in partitions
              if t in md.topics and p in md.topics[t].partitions]
    ends = _list_offsets(admin, args, hosted, OffsetSpec.latest())

    assignor = description.partition_assignor or "-"
    kind = _type(description)
    print(f"Group {args.group}: state {_state(description)}, "
          f"{len(description.members)} member(s), assignor {assignor}"
          + (f", protocol {kind}" if kind != "-" else ""))
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        lag = "-" if current is None or end is None else str(max(end - current, 0))
        member = owner.get(tp)
        rows.append([args.group, tp[0], str(tp[1]), "-" if current is None else str(current),
                     "-" if end is None else str(end), lag,
                     member.member_id if member else "-", member.host if member else "-",
                     member.client_id if member else "-"])
    for member in description.members:
        if not member.assignment.topic_partitions:
            rows.append([args.group, "-", "-", "-", "-", "-", member.member_id, member.host,
                         member.client_id])
    if len(rows) > 1:
        print(_table(rows))
    # A consumer-protocol group reconciles member by member: show who is still on the way.
    for member in description.members:
        target = getattr(member, "target_assignment", None)
        if target is None:
            continue
        now, then = _partitions(member.assignment), _partitions(target)
        if now != then:
            show = ", ".join(f"{t}-{p}" for t, p in sorted(then)) or "nothing"
            print(f"member {member.member_id} is reconciling towards: {show}")
    return 0


def _reset_partitions(admin: Any, args: argparse.Namespace) -> list[tuple[str, int]]:
    md = fetch_metadata(admin, args)
    chosen: list[tuple[str, int]] = []
    for spec in args.topic:
        name, _, wanted = spec.partition(":")
        topic = topic_metadata(md, name, args)
        available = sorted(topic.partitions)
        if wanted:
            try:
                picked = [int(p) for p in wanted.split(",")]
            except ValueError:
                raise CliError(f"bad --topic {spec!r}: expected TOPIC or TOPIC:P,P") from None
            missing = [p for p in picked if p not in available]
            if missing:
                raise CliError(f"topic {name!r} has no partition {missing[0]} "
                               f"(it has {len(available)})")
            available = picked
        chosen += [(name, p) for p in available]
    return chosen


def _groups_reset(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

    OffsetSpec: Any = _OffsetSpec  # untyped in confluent-kafka

    admin = admin_client(args)
    description = _describe(admin, args, args.group)
    if description.members:
        raise CliError(f"group {args.group!r} has {len(description.members)} live member(s) "
                       f"(state {_state(description)}): stop its consumers before resetting")
    partitions = _reset_partitions(admin, args)
    earliest = _list_offsets(admin, args, partitions, OffsetSpec.earliest())
    latest = _list_offsets(admin, args, partitions, OffsetSpec.latest())
    if args.to_earliest:
        target = earliest
    elif args.to_latest:
        target = latest
    elif args.to_offset is not None:
        target = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in partitions}
    else:
        found = _list_offsets(admin, args, partitions, OffsetSpec.for_timestamp(args.to_datetime))
        target = {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}
    committed = _committed(admin, args, args.group)
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]]
    for tp in partitions:
        current = committed.get(tp)
        rows.append([args.group, tp[0], str(tp[1]), "-" if current is None else str(current),
                     str(target[tp])])
    print(_table(rows))
    if args.dry_run:
        print("dry run: nothing changed (run without --dry-run to apply)", file=sys.stderr)
        return 0
    request = ConsumerGroupTopicPartitions(
        args.group, [TopicPartition(t, p, target[(t, p)]) for t, p in partitions])
    futures = admin.alter_consumer_group_offsets([request], request_timeout=CLIENT_TIMEOUT_S)
    result = _result(futures[args.group], args, f"reset of group {args.group!r}")
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    if failed:
        raise CliError(f"could not reset {failed[0].topic}/{failed[0].partition}: "
                       f"{failed[0].error.str()}")
    print(f"reset {len(partitions)} offset(s) of group {args.group}", file=sys.stderr)
    return 0


def _groups_delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    futures = admin.delete_consumer_groups(list(args.groups), request_timeout=CLIENT_TIMEOUT_S)
    wait_for(futures, args)
    for group in args.groups:
        print(f"deleted group {group}", file=sys.stderr)
    return 0
