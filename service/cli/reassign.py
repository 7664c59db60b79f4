"""``strata topics reassign``: move partitions to other brokers, as kafka-reassign-partitions.sh.

``strata topics reassign TOPIC --partition P --replicas 3[,1]`` asks the
cluster to move partition P of TOPIC onto the given brokers (the first is its
preferred leader); ``--cancel`` stops a move in progress; ``--list`` shows the
moves in progress. Any broker takes the request (it relays it to the active
controller). The move finishes by itself: the new replicas copy the partition
(the tiered part stays in the bucket), then the old ones drop their copies;
``--wait`` returns once no move of the partition is in progress.

Through kafka-python's admin client, the one Python Kafka client that sends
AlterPartitionReassignments and ListPartitionReassignments.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from service.cli.common import CLIENT_TIMEOUT_S, CliError, guarded, non_negative_int

__all__ = ["register"]


def register(topic_cmds: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add ``reassign`` under ``strata topics``."""
    p = topic_cmds.add_parser(
        "reassign", parents=[common],
        help="move a partition to other brokers, or list the moves in progress")
    p.add_argument("name", nargs="?", metavar="TOPIC")
    p.add_argument("--partition", type=non_negative_int, default=None, help="partition to move")
    p.add_argument("--replicas", default=None, metavar="ID[,ID...]",
                   help="brokers to move it to, preferred leader first")
    p.add_argument("--cancel", action="store_true", help="cancel the move of the partition")
    p.add_argument("--list", action="store_true", help="list the moves in progress")
    p.add_argument("--wait", action="store_true", help="return once the move is done")
    p.set_defaults(func=guarded(_reassign))


def _admin(args: argparse.Namespace) -> Any:
    from kafka import KafkaAdminClient

    try:
        return KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id="strata-cli",
                                request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    except Exception as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {exc}") from exc


def _reassign(args: argparse.Namespace) -> int:
    from kafka import TopicPartition

    admin = _admin(args)
    try:
        if args.list:
            _print_moves(admin.list_partition_reassignments())
            return 0
        if args.name is None or args.partition is None:
            raise CliError("give TOPIC and --partition (or --list)")
        if args.cancel == (args.replicas is not None):
            raise CliError("give either --replicas or --cancel")
        replicas = None
        if args.replicas is not None:
            try:
                replicas = [int(r) for r in args.replicas.split(",") if r.strip()]
            except ValueError:
                raise CliError(f"--replicas takes broker ids like 3 or 3,1, not {args.replicas!r}") from None
            if not replicas:
                raise CliError("--replicas names no broker")
        tp = TopicPartition(args.name, args.partition)
        errors = admin.alter_partition_reassignments({tp: replicas})
        error = errors.get(tp)
        if error is not None:
            raise CliError(f"{args.name}-{args.partition}: {getattr(error, 'message', error)}")
        what = "cancelled the move of" if replicas is None else f"moving to {replicas}:"
        print(f"{what} {args.name}-{args.partition}", file=sys.stderr)
        if args.wait:
            deadline = time.monotonic() + 10 * CLIENT_TIMEOUT_S
            while admin.list_partition_reassignments({args.name: [args.partition]}):
                if time.monotonic() > deadline:
                    raise CliError("the move did not finish in time (it goes on)")
                time.sleep(0.2)
            print(f"moved {args.name}-{args.partition}", file=sys.stderr)
        return 0
    finally:
        admin.close()


def _print_moves(moves: dict[Any, dict[str, list[int]]]) -> None:
    if not moves:
        print("no reassignment in progress", file=sys.stderr)
        return
    print(f"{'TOPIC':<30} {'PARTITION':>9}  REPLICAS        ADDING    REMOVING")
    for tp in sorted(moves, key=lambda t: (t.topic, t.partition)):
        m = moves[tp]
        print(f"{tp.topic:<30} {tp.partition:>9}  {m['replicas']!s:<15} "
              f"{m['adding_replicas']!s:<9} {m['removing_replicas']}")
