"""``strata produce`` and ``strata consume``: kafka-console-producer and -consumer, in short.

``produce`` sends one record per stdin line (optionally ``KEY<SEP>VALUE``) and
waits for every acknowledgement; ``consume`` prints records. Without ``--group``,
``consume`` assigns partitions by hand and never commits; with ``--group NAME`` it
joins that consumer group (the client's default protocol), starts from the
group's committed offsets (``--from-beginning`` where it has none) and commits
what it printed, like ``kafka-console-consumer --group``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import Any, BinaryIO

from service.cli.common import (
    CLIENT_ID,
    CLIENT_TIMEOUT_S,
    CliError,
    base_config,
    bootstrap_parent,
    describe_kafka_error,
    fetch_metadata,
    guarded,
    key_value,
    non_negative_int,
    positive_int,
    probe,
    topic_metadata,
)

__all__ = ["register"]

_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``produce`` and ``consume`` to the ``strata`` CLI."""
    common = bootstrap_parent()

    p = subparsers.add_parser("produce", parents=[common],
                              help="produce one record per stdin line")
    p.add_argument("topic")
    p.add_argument("--key-separator", default=None, metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--partition", type=non_negative_int, default=None)
    p.add_argument("--compression", choices=_CODECS, default="none")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   type=key_value, help="header added to every record, repeatable")
    p.set_defaults(func=guarded(_produce))

    p = subparsers.add_parser("consume", parents=[common],
                              help="print records of a topic (in a consumer group with --group)")
    p.add_argument("topic")
    p.add_argument("--group", default=None, metavar="NAME",
                   help="join consumer group NAME: start at its committed offsets and commit "
                   "what is printed (not with --partition or --offset)")
    p.add_argument("--partition", type=non_negative_int, default=None)
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=non_negative_int, default=None)
    p.add_argument("--max-messages", type=positive_int, default=None)
    p.add_argument("--timeout-ms", type=non_negative_int, default=None,
                   help="stop after this long without a record (default: never)")
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--print-offset", action="store_true",
                   help="print PARTITION:OFFSET before each record")
    p.add_argument("--print-headers", action="store_true")
    p.add_argument("--key-separator", default="\t", metavar="SEP",
                   help="separator between printed fields (default: tab)")
    p.set_defaults(func=guarded(_consume))


def _produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, Producer

    probe(args.bootstrap_server)
    producer = Producer({
        **base_config(args.bootstrap_server, args.command_config),
        "acks": "all",
        "linger.ms": 5,
        "compression.type": args.compression,
        "message.timeout.ms": int(CLIENT_TIMEOUT_S * 3 * 1000),
        "enable.idempotence": True,
    })
    topic = topic_metadata(fetch_metadata(producer, args, args.topic), args.topic, args)
    if args.partition is not None and args.partition not in topic.partitions:
        raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                       f"(it has {len(topic.partitions)}): see `strata topics describe`")

    headers = [(k, v.encode()) for k, v in args.header] or None
    separator = args.key_separator.encode() if args.key_separator else None
    errors: list[Any] = []
    delivered = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    sent = 0
    extra: dict[str, Any] = {}
    if args.partition is not None:
        extra["partition"] = args.partition
    if headers:
        extra["headers"] = headers
    for line in _lines(sys.stdin.buffer):
        key: bytes | None = None
        value = line
        if separator is not None:
            head, sep, tail = line.partition(separator)
            if sep:
                key, value = head, tail
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery,
                                 **extra)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
        if errors:
            break

    remaining = producer.flush(CLIENT_TIMEOUT_S * 3 + 5)
    if errors:
        detail = describe_kafka_error(errors[0], args) if isinstance(errors[0], KafkaError) \
            else str(errors[0])
        raise CliError(f"{sent - delivered} of {sent} records were not produced to "
                       f"{args.topic}: {detail}")
    if remaining:
        raise CliError(f"{remaining} of {sent} records were not acknowledged by "
                       f"{args.bootstrap_server} in time: is the broker healthy?")
    print(f"produced {delivered} records to {args.topic}", file=sys.stderr)
    return 0


def _lines(stream: BinaryIO) -> Iterable[bytes]:
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


# --------------------------------------------------------------------------- consume


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaError,
        TopicPartition,
    )

    if args.group is not None and (args.partition is not None or args.offset is not None):
        raise CliError("--group cannot go with --partition or --offset: a group's members are "
                       "given partitions and start at the group's committed offsets (reset them "
                       "with `strata groups reset`)")
    probe(args.bootstrap_server)
    reset = "earliest" if args.from_beginning else "latest"
    if args.offset is not None:
        reset = "error"
    if args.group is not None:
        # the client's defaults: auto commit of what consume() returned, and on close
        config: dict[str, Any] = {"group.id": args.group}
    else:
        # librdkafka insists on a group.id; it is never joined and nothing is committed.
        config = {"group.id": f"{CLIENT_ID}-consume", "enable.auto.commit": False,
                  "enable.auto.offset.store": False}
    consumer = Consumer({
        **base_config(args.bootstrap_server, args.command_config),
        **config,
        "auto.offset.reset": reset,
        "enable.partition.eof": False,
    })
    last_data = time.monotonic()
    closed = False

    def assigned(_consumer: Any, _partitions: Any) -> None:
        nonlocal last_data
        last_data = time.monotonic()  # the idle timeout counts from the group's assignment

    try:
        topic = topic_metadata(fetch_metadata(consumer, args, args.topic), args.topic, args)
        partitions: list[int] = []
        if args.group is not None:
            consumer.subscribe([args.topic], on_assign=assigned)
        elif args.partition is not None:
            if args.partition not in topic.partitions:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                               f"(it has {len(topic.partitions)})")
            partitions = [args.partition]
        else:
            partitions = sorted(topic.partitions)
        if args.offset is not None:
            start = args.offset
        elif args.from_beginning:
            start = OFFSET_BEGINNING
        else:
            start = OFFSET_END
        if partitions:
            consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])

        out = sys.stdout.buffer
        sep = args.key_separator.encode()
        count = 0
        idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000.0
        last_data = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            want = 500 if args.max_messages is None else min(500, args.max_messages - count)
            batch = consumer.consume(num_messages=want, timeout=0.2)
            now = time.monotonic()
            got_data = False
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE,
                                      KafkaError._AUTO_OFFSET_RESET):
                        raise CliError(f"offset {args.offset} is out of range for "
                                       f"{args.topic} partition {msg.partition()}: "
                                       "see `strata topics describe` for the valid range")
                    if err.fatal() or not err.retriable():
                        raise CliError(describe_kafka_error(err, args))
                    continue
                got_data = True
                out.write(_format(msg, args, sep))
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    break
            if got_data:
                out.flush()
                last_data = now
            elif idle_limit is not None and now - last_data >= idle_limit:
                break
        out.flush()
        consumer.close()  # in a group: commits the offsets of what was printed, and leaves it
        closed = True
        group = f" as group {args.group}, offsets committed" if args.group else ""
        print(f"consumed {count} records from {args.topic}{group}", file=sys.stderr)
        return 0
    finally:
        if not closed:
            consumer.close()


def _format(msg: Any, args: argparse.Namespace, sep: bytes) -> bytes:
    fields: list[bytes] = []
    if args.print_offset:
        fields.append(f"{msg.partition()}:{msg.offset()}".encode())
    if args.print_key:
        key = msg.key()
        fields.append(b"null" if key is None else key)
    if args.print_headers:
        headers = msg.headers() or []
        fields.append(b",".join(
            k.encode() + b"=" + (b"null" if v is None else v) for k, v in headers))
    value = msg.value()
    fields.append(b"null" if value is None else value)
    return sep.join(fields) + b"\n"
