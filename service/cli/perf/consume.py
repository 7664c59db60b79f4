"""`strata perf consume`: Kafka's kafka-consumer-perf-test over librdkafka.

Reads exactly ``--messages`` records of ``--topic`` with ``consume(num_messages=...)``
batches and prints Kafka's header and one row::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec

timed as Kafka's tool times it: from just before subscribing (or assigning) to
the last record; data is key plus value bytes; ``rebalance.time.ms`` is the time
spent without partitions (from ``subscribe()`` to the first assignment, and
again after a revocation), and the ``fetch.*`` columns exclude it.

Without ``--group`` the consumer assigns every partition itself (from the
earliest offset, or the latest with ``--from-latest``), joins no group and
commits nothing, so rebalance.time.ms is 0. With ``--group G`` it subscribes
as member of G, commits as Kafka's tool does (auto-commit), and starts from G's
committed offsets when it has them.

Defaults are librdkafka's, but ``fetch.queue.backoff.ms`` is 10 ms instead of
1000: with the default librdkafka stops fetching a partition for a second each
time its local queue passes ``queued.min.messages``, which caps a consumer that
drains faster than one fetch (a quarter of the rate on a local broker).

``--timeout`` is Kafka's: the longest wait, in ms, for the next records (the
first wait includes the group join). When it passes before ``--messages``
records arrived, the row of what was read is printed and the command fails with
one line on stderr. ``--show-detailed-stats`` prints Kafka's periodic rows
instead of the summary; otherwise a progress line goes to stderr every
``--reporting-interval`` on long runs, leaving stdout to the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import random
import sys
import time
from typing import Any

from service.cli.common import (
    CliError,
    describe_kafka_error,
    fetch_metadata,
    guarded,
    non_negative_int,
    positive_int,
    probe,
    topic_metadata,
)
from service.cli.perf.common import ClientHealth, client_config, kafka_error_text, prop, user_props

__all__ = ["DETAILED_HEADER", "HEADER", "register"]

CONSUMER_CLIENT_ID = "perf-consumer-client"  # Kafka's tool's default client.id
HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
          "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
_BATCH = 10_000  # records per consume() call at most
_POLL_S = 0.1  # Kafka's tool polls with 100 ms
_MB = 1024 * 1024
_FETCH_QUEUE_BACKOFF_MS = 10


def register(cmds: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add ``perf consume`` under ``strata perf``."""
    p = cmds.add_parser(
        "consume", parents=[common], help="consume records as fast as possible; report "
        "MB/s, records/s and rebalance time (kafka-consumer-perf-test)")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="consume from this topic")
    p.add_argument("--messages", required=True, type=positive_int, metavar="N",
                   help="number of records to consume")
    p.add_argument("--group", default=None, metavar="GROUP",
                   help="subscribe as a member of this consumer group (default: assign every "
                   "partition, no group)")
    p.add_argument("--from-latest", action="store_true",
                   help="start at the end of the log, not the beginning, when there is no "
                   "committed offset")
    p.add_argument("--timeout", type=non_negative_int, default=10_000, metavar="MS",
                   help="longest wait for the next records before giving up "
                   "(default: %(default)s)")
    p.add_argument("--fetch-size", type=positive_int, default=1024 * 1024, metavar="BYTES",
                   help="max.partition.fetch.bytes (default: %(default)s)")
    p.add_argument("--consumer-props", nargs="+", action="extend", default=[], type=prop,
                   metavar="KEY=VALUE", help="librdkafka consumer properties "
                   "(they win over --consumer.config)")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="a properties file of consumer properties")
    p.add_argument("--reporting-interval", type=positive_int, default=5000, metavar="MS",
                   help="interval between progress reports (default: %(default)s)")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="print a row per reporting interval instead of the summary")
    p.add_argument("--hide-header", action="store_true", help="do not print the header")
    p.set_defaults(func=guarded(_perf_consume), perf_parser=p)


class _JoinTimer:
    """Time spent without an assignment, as Kafka's ConsumerPerfRebListener measures it."""

    def __init__(self, start: float) -> None:
        self.total_s = 0.0
        self.round_s = 0.0  # since the last detailed row
        self._join_start = start
        self._assigned: set[tuple[str, int]] = set()

    @property
    def assigned(self) -> bool:
        return bool(self._assigned)

    def on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        if not self._assigned:
            waited = time.monotonic() - self._join_start
            self.total_s += waited
            self.round_s += waited
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)

    def on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        self._assigned.difference_update((tp.topic, tp.partition) for tp in partitions)
        if not self._assigned:
            self._join_start = time.monotonic()


def _perf_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, KafkaException

    parser: argparse.ArgumentParser = args.perf_parser
    props, bootstrap = user_props(args, "consumer")
    health = ClientHealth()
    conf: dict[str, Any] = {
        **client_config(bootstrap, CONSUMER_CLIENT_ID),
        # librdkafka insists on a group.id; without --group it is never joined.
        "group.id": args.group or f"perf-consumer-{random.randrange(100_000)}",
        "enable.auto.commit": args.group is not None,
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "max.partition.fetch.bytes": args.fetch_size,
        "enable.partition.eof": False,
        # librdkafka waits this long to fetch again once its queue passed queued.min.messages
        # (default 1000 ms): a consumer faster than one fetch would stall for most of the run.
        "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS,
        **props,
        "error_cb": health.on_error,
    }
    try:
        consumer = Consumer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        parser.error(f"--consumer-props: {kafka_error_text(exc)}")
    try:
        probe(bootstrap)
        topic = topic_metadata(fetch_metadata(consumer, args, args.topic), args.topic, args)
        return _consume_records(consumer, args, sorted(topic.partitions), health)
    finally:
        consumer.close()


def _consume_records(consumer: Any, args: argparse.Namespace, partitions: list[int],
                     health: ClientHealth) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    wanted: int = args.messages
    detailed: bool = args.show_detailed_stats
    if not args.hide_header:
        print(DETAILED_HEADER if detailed else HEADER, flush=True)

    start_wall = time.time()
    start = time.monotonic()
    join = _JoinTimer(start)
    if args.group is not None:
        consumer.subscribe([args.topic], on_assign=join.on_assign, on_revoke=join.on_revoke)
    else:
        offset = OFFSET_END if args.from_latest else OFFSET_BEGINNING
        consumer.assign([TopicPartition(args.topic, p, offset) for p in partitions])

    consume = consumer.consume
    count = 0
    nbytes = 0
    timeout_s = args.timeout / 1000.0
    interval_s = args.reporting_interval / 1000.0
    last_consumed = start
    last_report, last_count, last_bytes = start, 0, 0
    while count < wanted and not health.fatal:
        batch = consume(num_messages=min(_BATCH, wanted - count), timeout=_POLL_S)
        now = time.monotonic()
        if batch:
            last_consumed = now
            health.progress()
            for msg in batch:
                err = msg.error()
                if err is None:
                    key = msg.key()
                    nbytes += len(msg) if key is None else len(msg) + len(key)
                    count += 1
                else:
                    _check(err, args)
        elif now - last_consumed > timeout_s:
            break
        if now - last_report >= interval_s:
            window = now - last_report
            if detailed:
                print(", ".join((_format_time(start_wall + now - start), "0", *_stats_fields(
                    nbytes, count, nbytes - last_bytes, count - last_count, window,
                    join.round_s))), flush=True)
                join.round_s = 0.0
            else:
                print(f"{count} of {wanted} records consumed, "
                      f"{(count - last_count) / window:.1f} records/sec "
                      f"({(nbytes - last_bytes) / _MB / window:.2f} MB/sec)",
                      file=sys.stderr, flush=True)
            last_report, last_count, last_bytes = now, count, nbytes
    elapsed = time.monotonic() - start

    if health.fatal:
        failure = health.failure(args, "consumer")
        assert failure is not None
        raise failure
    if not detailed:
        print(", ".join((_format_time(start_wall), _format_time(start_wall + elapsed),
                         *_stats_fields(nbytes, count, nbytes, count, elapsed, join.total_s))),
              flush=True)
    if count < wanted:
        if health.down_since is not None:
            hint = f"the broker at {args.bootstrap_server} stopped answering; is it still running?"
        elif args.group is not None and not join.assigned:
            hint = f"the group {args.group} gave this consumer no partitions in time"
        elif args.group is not None:
            hint = (f"has the group {args.group} committed offsets near the end? "
                    f"see `strata groups describe {args.group}`")
        elif args.from_latest:
            hint = "is anyone producing?"
        else:
            hint = "does the topic hold that many records? see `strata topics describe`"
        raise CliError(f"consumed only {count} of {wanted} records from {args.topic}: none "
                       f"arrived for {args.timeout} ms (--timeout); {hint}")
    return 0


def _check(err: Any, args: argparse.Namespace) -> None:
    """Fail on an error that more waiting cannot cure; librdkafka retries the rest."""
    from confluent_kafka import KafkaError

    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return
    if err.fatal() or code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                               KafkaError._UNKNOWN_PARTITION, KafkaError.OFFSET_OUT_OF_RANGE,
                               KafkaError._AUTO_OFFSET_RESET,
                               KafkaError.TOPIC_AUTHORIZATION_FAILED,
                               KafkaError.GROUP_AUTHORIZATION_FAILED):
        raise CliError(describe_kafka_error(err, args))


def _stats_fields(total_bytes: int, total_count: int, nbytes: int, count: int, seconds: float,
                  join_s: float) -> tuple[str, ...]:
    """Kafka's columns from data.consumed.in.MB on: totals so far, rates over ``seconds``
    (``nbytes`` and ``count`` read in them), then rebalance time and rates without it."""
    fetch_s = seconds - join_s
    return (f"{total_bytes / _MB:.4f}", f"{_ratio(nbytes / _MB, seconds):.4f}", str(total_count),
            f"{_ratio(count, seconds):.4f}", str(round(join_s * 1000)),
            str(round(fetch_s * 1000)), f"{_ratio(nbytes / _MB, fetch_s):.4f}",
            f"{_ratio(count, fetch_s):.4f}")


def _ratio(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def _format_time(epoch_s: float) -> str:
    """Kafka's default --date-format, yyyy-MM-dd HH:mm:ss:SSS, in local time."""
    moment = _dt.datetime.fromtimestamp(epoch_s)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"
