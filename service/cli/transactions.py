"""`strata transactions list|describe|describe-producers`, in the manner of kafka-transactions.sh.

ListTransactions, DescribeTransactions and DescribeProducers are Kafka admin APIs
that librdkafka's AdminClient does not offer, so these commands use
kafka-python's admin client; like every client command they work against any
Kafka-compatible broker, and a failure is one line on stderr with exit code 1.
The columns are kafka-transactions.sh's.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from service.cli.common import (
    CLIENT_ID,
    CLIENT_TIMEOUT_S,
    CliError,
    bootstrap_parent,
    guarded,
    needs_subcommand,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``transactions`` (list, describe, describe-producers) to the ``strata`` CLI."""
    common = bootstrap_parent()
    txns = subparsers.add_parser("transactions", help="list and describe transactions")
    cmds = txns.add_subparsers(dest="transactions_command", metavar="COMMAND")
    txns.set_defaults(func=needs_subcommand(txns))

    p = cmds.add_parser("list", parents=[common], help="every transactional id the coordinators know")
    p.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="only these states (Ongoing, PrepareCommit, CompleteAbort...), repeatable")
    p.set_defaults(func=guarded(_list))

    p = cmds.add_parser("describe", parents=[common], help="the state of one transactional id")
    p.add_argument("--transactional-id", required=True)
    p.set_defaults(func=guarded(_describe))

    p = cmds.add_parser("describe-producers", parents=[common],
                        help="the active producers of one partition (its producer state)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--broker-id", type=int, default=None,
                   help="ask this broker's replica (default: the partition's leader)")
    p.set_defaults(func=guarded(_describe_producers))


def _admin(args: argparse.Namespace) -> Any:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its errors are reported here, once
    try:
        return KafkaAdminClient(
            bootstrap_servers=args.bootstrap_server, client_id=CLIENT_ID,
            request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
        )
    except KafkaError as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {exc}") from None


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _state(value: Any) -> str:
    return str(getattr(value, "value", value))


def _list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        listings = admin.list_transactions(state_filters=args.state or None)
    finally:
        admin.close()
    rows = [["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]]
    found = [(t, node) for node, items in listings.items() for t in items]
    for t, node in sorted(found, key=lambda item: item[0].transactional_id):
        rows.append([t.transactional_id, str(node), str(t.producer_id), _state(t.state)])
    print(_table(rows))
    return 0


def _describe(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    admin = _admin(args)
    try:
        found = admin.describe_transactions([args.transactional_id])
    except KafkaError as exc:
        raise CliError(f"transactional id {args.transactional_id!r}: {type(exc).__name__}") from None
    finally:
        admin.close()
    d = found[args.transactional_id]
    start = d.transaction_start_time_ms
    now = int(time.time() * 1000)
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions))
    rows = [
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"],
        [str(d.coordinator_id), args.transactional_id, str(d.producer_id), str(d.producer_epoch),
         _state(d.state), str(d.transaction_timeout_ms), str(start) if start >= 0 else "None",
         str(now - start) if start >= 0 else "None", partitions],
    ]
    print(_table(rows))
    return 0


def _describe_producers(args: argparse.Namespace) -> int:
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    tp = TopicPartition(args.topic, args.partition)
    admin = _admin(args)
    try:
        found = admin.describe_producers([tp], broker_id=args.broker_id)
    except KafkaError as exc:
        where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
        raise CliError(
            f"Failed to describe producers for partition {args.topic}-{args.partition} on {where}: "
            f"{type(exc).__name__}"
        ) from None
    finally:
        admin.close()
    rows = [["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
             "CurrentTransactionStartOffset"]]
    for p in found[tp].active_producers:
        start = p.current_transaction_start_offset
        rows.append([str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                     str(p.last_sequence), str(p.last_timestamp), str(start) if start >= 0 else "None"])
    print(_table(rows))
    return 0
