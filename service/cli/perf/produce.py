"""`strata perf produce`: Kafka's kafka-producer-perf-test over librdkafka.

Sends ``--num-records`` records to ``--topic``: copies of one pre-built payload
of ``--record-size`` random uppercase letters (Kafka's tool draws such letters
too), or records drawn at random from ``--payload-file``. No keys, so the
partitioner spreads them, as with Kafka's tool.

A record's latency is the time from its ``produce()`` call to its delivery
callback, as in Kafka's tool. The callback only stores librdkafka's
``msg.latency()`` into a preallocated array (:class:`~service.cli.perf.stats.LatencyRecorder`
folds it between polls); ``produce()`` is called positionally, ``poll(0)``
every :data:`_POLL_EVERY` records, and a full queue (``BufferError``) is waited
out in ``poll()``. A record costs about 1.5 us of CPU in all (the ``produce()``
call, its delivery callback, librdkafka's own threads), so one core pushes
several hundred thousand records/s and the broker, not the tool, sets the pace.
``--throughput`` paces like Kafka's ThroughputThrottler; ``-1`` (the default)
does not.

Output on stdout, as Kafka's: a progress line every ``--reporting-interval``
(5 s)::

    N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms max latency.

then the summary line::

    N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms max latency,
    a ms 50th, b ms 95th, c ms 99th, d ms 99.9th.

and with ``--print-metrics`` Kafka's metric table of ``batch-size-avg``,
``bufferpool-wait-ratio``, ``outgoing-byte-rate``, ``record-queue-time-avg`` and
``request-latency-avg``, derived from librdkafka's statistics
(:class:`~service.cli.perf.stats.ProducerMetrics` says how).

Delivery failures stop the run: queued records are purged, the summary of what
was delivered is printed, and one line on stderr says what failed (exit 1).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli.common import (
    CliError,
    describe_kafka_error,
    fetch_metadata,
    guarded,
    positive_int,
    probe,
    topic_metadata,
)
from service.cli.perf.common import ClientHealth, client_config, kafka_error_text, prop, user_props

if TYPE_CHECKING:
    from service.cli.perf.stats import LatencyRecorder

__all__ = ["PRODUCER_CLIENT_ID", "register"]

PRODUCER_CLIENT_ID = "perf-producer-client"  # Kafka's tool's default client.id
_REPORTING_INTERVAL_MS = 5000  # Kafka's producer tool reports every 5 s
_MESSAGE_TIMEOUT_MS = 30_000  # bounds the wait for acknowledgements of a stuck broker
_STATS_INTERVAL_MS = 200  # statistics.interval.ms with --print-metrics
_POLL_EVERY = 100  # records between two poll(0) calls on the hot path
_ROOM_WAIT_S = 0.005  # poll timeout while the producer queue is full
_PARTITION_ANY = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose
_DEFAULT_QUEUE_MESSAGES = 100_000  # librdkafka's queue.buffering.max.messages default
_ORDER_SIZE = 1 << 16  # random payload order for --payload-file, cycled
_MB = 1024 * 1024


def register(cmds: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add ``perf produce`` under ``strata perf``."""
    p = cmds.add_parser(
        "produce", parents=[common], help="produce records as fast as asked; report "
        "records/s, MB/s and latency percentiles (kafka-producer-perf-test)")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="produce to this topic")
    p.add_argument("--num-records", required=True, type=positive_int, metavar="N",
                   help="number of records to produce")
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=positive_int, metavar="BYTES",
                         help="size of each record's value (random uppercase letters)")
    payload.add_argument("--payload-file", metavar="FILE",
                         help="draw each record's value at random from this file's "
                         "records (split at --payload-delimiter)")
    p.add_argument("--payload-delimiter", default="\\n", metavar="DELIM",
                   help="separator of the records in --payload-file (default: newline)")
    p.add_argument("--throughput", type=_throughput, default=-1.0, metavar="RECORDS_PER_S",
                   help="pace to about this many records/s; -1 for no limit (default)")
    p.add_argument("--producer-props", nargs="+", action="extend", default=[],
                   type=prop, metavar="KEY=VALUE",
                   help="librdkafka producer properties, e.g. acks=1 linger.ms=5 "
                   "compression.type=lz4 (they win over --producer.config and "
                   "bootstrap.servers over --bootstrap-server)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                   help="a properties file of producer properties")
    p.add_argument("--print-metrics", action="store_true",
                   help="print producer metrics (from librdkafka's statistics) at the end")
    p.add_argument("--reporting-interval", type=positive_int, default=_REPORTING_INTERVAL_MS,
                   metavar="MS", help="interval between progress lines (default: %(default)s)")
    p.set_defaults(func=guarded(_perf_produce), perf_parser=p)


def _throughput(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value == 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(
            f"must be a positive rate, or -1 for no limit, got {text!r}")
    return value


@dataclass
class _ProduceResult:
    sent: int
    delivered: int
    delivered_bytes: int
    elapsed_s: float
    blocked_s: float
    errors: list[Any]
    unacknowledged: int


def _perf_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    from service.cli.perf.stats import LatencyRecorder, ProducerMetrics, format_metrics_table

    parser: argparse.ArgumentParser = args.perf_parser
    props, bootstrap = user_props(args, "producer")
    payloads = _payloads(args, parser)

    health = ClientHealth()
    conf: dict[str, Any] = {
        **client_config(bootstrap, PRODUCER_CLIENT_ID),
        "message.timeout.ms": _MESSAGE_TIMEOUT_MS,
        **props,
        "error_cb": health.on_error,
    }
    metrics = ProducerMetrics() if args.print_metrics else None
    if metrics is not None:
        if str(conf.get("statistics.interval.ms", "0")) == "0":
            conf["statistics.interval.ms"] = _STATS_INTERVAL_MS
        conf["stats_cb"] = metrics
    try:
        producer = Producer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        parser.error(f"--producer-props: {kafka_error_text(exc)}")

    probe(bootstrap)
    topic_metadata(fetch_metadata(producer, args, args.topic), args.topic, args)

    queue_messages = int(conf.get("queue.buffering.max.messages", _DEFAULT_QUEUE_MESSAGES))
    recorder = LatencyRecorder(args.num_records, queue_messages + _POLL_EVERY)
    flush_timeout_s = int(conf.get("message.timeout.ms", _MESSAGE_TIMEOUT_MS)) / 1000.0 + 5.0
    result = _produce_records(producer, args, payloads, recorder, health, flush_timeout_s)

    p50, p95, p99, p999 = recorder.percentiles_ms()
    print(f"{result.delivered} records sent, {result.delivered / result.elapsed_s:f} records/sec "
          f"({result.delivered_bytes / result.elapsed_s / _MB:.2f} MB/sec), "
          f"{recorder.avg_ms:.2f} ms avg latency, {recorder.max_ms:.2f} ms max latency, "
          f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.", flush=True)

    if metrics is not None and not health.failed():
        _await_final_statistics(producer, metrics, int(conf["statistics.interval.ms"]))
        table = format_metrics_table(
            "producer-metrics", {"client-id": str(conf["client.id"])},
            metrics.metrics(result.elapsed_s, result.blocked_s))
        print(table, flush=True)

    _raise_for_failures(result, health, args)
    return 0


def _payloads(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[bytes]:
    """One random payload of --record-size bytes, or the records of --payload-file."""
    import numpy as np

    if args.record_size is not None:
        rng = np.random.default_rng(0)
        return [rng.integers(ord("A"), ord("Z") + 1, size=args.record_size,
                             dtype=np.uint8).tobytes()]
    path = Path(args.payload_file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        parser.error(f"--payload-file: cannot read {path}: {exc.strerror or exc}")
    delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
    if not delimiter:
        parser.error("--payload-delimiter must not be empty")
    payloads = [p for p in data.split(delimiter.encode()) if p]
    if not payloads:
        parser.error(f"--payload-file: {path} holds no records")
    print(f"Reading payloads from: {path.resolve()}")
    print(f"Number of messages read: {len(payloads)}", flush=True)
    return payloads


def _produce_records(producer: Any, args: argparse.Namespace, payloads: list[bytes],
                     recorder: LatencyRecorder, health: ClientHealth,
                     flush_timeout_s: float) -> _ProduceResult:
    """Produce, pace, report progress, flush; the hot loops stay as small as they can."""
    import numpy as np

    from service.cli.perf.stats import ThroughputThrottler

    topic: str = args.topic
    total: int = args.num_records
    errors: list[Any] = []
    delivered = 0
    delivered_bytes = 0  # only counted per record when payload sizes differ
    store = recorder.store
    mask = recorder.mask

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is None:
            store[delivered & mask] = msg.latency()
            delivered += 1
        else:
            errors.append(err)

    def on_delivery_sized(err: Any, msg: Any) -> None:
        nonlocal delivered, delivered_bytes
        if err is None:
            store[delivered & mask] = msg.latency()
            delivered_bytes += len(msg)
            delivered += 1
        else:
            errors.append(err)

    fixed = len(payloads) == 1
    record_size = len(payloads[0])
    payload = payloads[0]
    callback = on_delivery if fixed else on_delivery_sized
    order: list[int] = np.random.default_rng(1).integers(
        0, len(payloads), size=_ORDER_SIZE).tolist()
    produce = producer.produce
    poll = producer.poll
    blocked = 0.0

    def produce_when_room(value: bytes) -> None:
        # The queue is full (librdkafka's equivalent of Kafka's exhausted buffer.memory):
        # serve delivery reports until it takes the record; the wait is bufferpool-wait.
        nonlocal blocked
        began = time.perf_counter()
        while not health.failed():
            poll(_ROOM_WAIT_S)
            try:
                produce(topic, value, None, _PARTITION_ANY, callback)
                break
            except BufferError:
                continue
        blocked += time.perf_counter() - began

    def bytes_so_far() -> int:
        return delivered * record_size if fixed else delivered_bytes

    start = time.monotonic()
    throttler = ThroughputThrottler(args.throughput, start)
    interval_s = args.reporting_interval / 1000.0
    window_start = start
    window_bytes_start = 0
    next_report = start + interval_s
    seen = 0

    def tick() -> None:
        nonlocal window_start, window_bytes_start, next_report, seen
        if delivered != seen:
            seen = delivered
            health.progress()
        if recorder.needs_fold(delivered):
            recorder.fold(delivered)
        now = time.monotonic()
        if now < next_report:
            return
        recorder.fold(delivered)
        window = recorder.take_window()
        elapsed = max(now - window_start, 1e-9)
        window_bytes = bytes_so_far() - window_bytes_start
        print(f"{window.count} records sent, {window.count / elapsed:.1f} records/sec "
              f"({window_bytes / elapsed / _MB:.2f} MB/sec), {window.avg_ms:.1f} ms avg "
              f"latency, {window.max_ms:.1f} ms max latency.", flush=True)
        window_start = now
        window_bytes_start += window_bytes
        next_report = now + interval_s

    sent = 0
    # Paced runs check progress and health at least every ~0.1 s worth of records.
    step = _POLL_EVERY if throttler.unthrottled else max(1, min(_POLL_EVERY,
                                                                int(args.throughput / 10)))
    # Positional produce(topic, value, key, partition, on_delivery): cheaper than keywords.
    while sent < total and not errors and not health.failed():
        batch = min(step, total - sent)
        if not throttler.unthrottled:
            for i in range(sent, sent + batch):
                value = payload if fixed else payloads[order[i & (_ORDER_SIZE - 1)]]
                now = time.monotonic()
                try:
                    produce(topic, value, None, _PARTITION_ANY, callback)
                except BufferError:
                    produce_when_room(value)
                if throttler.should_throttle(i, now):
                    throttler.throttle(poll)
        elif fixed:
            for _ in repeat(None, batch):
                try:
                    produce(topic, payload, None, _PARTITION_ANY, callback)
                except BufferError:
                    produce_when_room(payload)
        else:
            for i in range(sent, sent + batch):
                value = payloads[order[i & (_ORDER_SIZE - 1)]]
                try:
                    produce(topic, value, None, _PARTITION_ANY, callback)
                except BufferError:
                    produce_when_room(value)
        poll(0)
        sent += batch
        tick()

    if errors or health.failed():
        producer.purge(in_queue=True, in_flight=False)  # stop early: the run has failed
    deadline = time.monotonic() + flush_timeout_s
    while len(producer) > 0 and not health.failed():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        poll(min(0.1, max(remaining, 0.001)))
        tick()
    elapsed = max(time.monotonic() - start, 1e-9)
    recorder.fold(delivered)
    return _ProduceResult(sent, delivered, bytes_so_far(), elapsed, blocked, errors,
                          len(producer))


def _await_final_statistics(producer: Any, metrics: Any, interval_ms: int) -> None:
    """Serve statistics until one emitted after the last delivery has arrived.

    The first emission served after the flush may have been queued before it, so
    wait for two; both come within two intervals.
    """
    target = metrics.emissions + 2
    deadline = time.monotonic() + 2 * interval_ms / 1000.0 + 1.0
    while metrics.emissions < target and time.monotonic() < deadline:
        producer.poll(0.05)


def _raise_for_failures(result: _ProduceResult, health: ClientHealth,
                        args: argparse.Namespace) -> None:
    from confluent_kafka import KafkaError

    failure = health.failure(args, "producer")
    if failure is not None:
        raise failure
    real = [e for e in result.errors if e.code() != KafkaError._PURGE_QUEUE]
    if real:
        first = real[0]
        if first.code() == KafkaError._MSG_TIMED_OUT:
            detail = (f"not acknowledged by {args.bootstrap_server} within message.timeout.ms:"
                      " is the broker healthy?")
        else:
            detail = describe_kafka_error(first, args)
        raise CliError(f"{len(real)} records failed, stopped after {result.sent} of "
                       f"{args.num_records}: {detail}")
    if result.unacknowledged:
        raise CliError(f"{result.unacknowledged} records were still unacknowledged by "
                       f"{args.bootstrap_server} at the end: is the broker healthy?")
