"""Client processes for ``bench/peers.py``: the same workload through a Kafka and a NATS client.

Each role runs as its own process and prints a last JSON line (other lines are
progress). Both sides work under the same conditions:

* one process, one connection, one partition (Kafka) or one stream (JetStream);
* the records are the lines of the same pre-generated file, loaded into memory
  before the clock starts;
* produce: every record is handed to the client in a loop from Python and the clock
  stops when the last one is acknowledged by the server (Kafka ``acks=1``; a
  JetStream PubAck, which the server sends once the message is in its file store);
  no per-record fsync on either server (Strata's ``flush.messages`` default, JetStream's
  2-minute ``sync_interval``);
* consume: from the first record of a topic/stream in the page cache to the last,
  no acknowledgement or offset commit per record; the clock stops at the last record;
* connection set-up, metadata and stream/consumer creation happen before the clock
  starts; the process's own CPU time over the timed part is reported.

Kafka (librdkafka through confluent-kafka):

    python bench/peer_clients.py kafka-produce --bootstrap H:P --topic T --file F --count N
    python bench/peer_clients.py kafka-consume --bootstrap H:P --topic T --count N --size S

  produce(): ``acks=1, linger.ms=5, batch.size=1 MiB`` (foundation.py's settings), a
  delivery callback per record that counts errors, ``poll(0)`` every 1,000 records
  and ``flush()`` at the end. Consume: ``consume(num_messages=min(100000, left))`` loop
  with foundation.py's consumer settings.

NATS JetStream (nats-py, the NATS Python client; pure Python on asyncio):

    python bench/peer_clients.py nats-produce --server URL --stream S --file F --count N
    python bench/peer_clients.py nats-consume --server URL --stream S --count N --size S

  Produce: core ``publish(subject, payload, reply=INBOX)`` with one subscription on
  INBOX counting the PubAcks and at most ``--window`` unacknowledged messages (what
  nats-py's ``js.publish_async`` does, without a future per message: measured at about
  3x its rate). Consume: a durable pull consumer (``AckPolicy.NONE``, deliver all)
  fed by pull requests of ``--batch`` messages, the next request sent when half of the
  outstanding batch has arrived so the server never waits for the client (nats-py's
  own ``fetch(batch)`` awaits each message with a timeout and measured about 6x slower).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time


def _load(path: str, count: int) -> list[bytes]:
    with open(path, "rb") as f:
        values = f.read().split(b"\n")[:count]
    if len(values) != count:
        raise SystemExit(f"{path} holds {len(values)} records, not {count}")
    return values


def _result(records: int, nbytes: int, seconds: float, cpu: float, **extra) -> None:
    print(json.dumps({"records": records, "bytes": nbytes, "seconds": seconds, "cpu_seconds": cpu,
                      "records_per_s": records / seconds, "mb_per_s": nbytes / seconds / 1e6, **extra}),
          flush=True)


# --------------------------------------------------------------------------- Kafka

KAFKA_PRODUCER = {"acks": "1", "linger.ms": "5", "batch.size": "1048576",
                  "queue.buffering.max.messages": "10000000", "queue.buffering.max.kbytes": "2097151"}
KAFKA_CONSUMER = {"fetch.max.bytes": "52428800", "max.partition.fetch.bytes": "16777216",
                  "fetch.wait.max.ms": "10", "queued.min.messages": "10000000",
                  "queued.max.messages.kbytes": "2097151"}


def kafka_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    values = _load(args.file, args.count)
    p = Producer({"bootstrap.servers": args.bootstrap, **KAFKA_PRODUCER})
    p.list_topics(args.topic, timeout=10)  # connect and fetch metadata before the clock starts
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    produce, poll, topic = p.produce, p.poll, args.topic
    c0, t0 = time.process_time(), time.perf_counter()
    next_report = t0 + 1.0
    for i, v in enumerate(values):
        while True:
            try:
                produce(topic, v, partition=0, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let librdkafka deliver, then retry
                poll(0.001)
        if i % 1000 == 0:
            poll(0)
            now = time.perf_counter()
            if now >= next_report:
                next_report = now + 1.0
                print(f"    kafka producer: {i:,}/{args.count:,} records handed over", flush=True)
    left = p.flush(120)
    t1, c1 = time.perf_counter(), time.process_time()
    if left or errors:
        raise SystemExit(f"{left} records undelivered, {len(errors)} errors: {errors[:3]}")
    _result(args.count, sum(map(len, values)), t1 - t0, c1 - c0, errors=len(errors))
    return 0


def kafka_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "strata-bench-peers",
                  "enable.auto.commit": False, "enable.auto.offset.store": False, **KAFKA_CONSUMER})
    c.list_topics(args.topic, timeout=10)
    n = nbytes = 0
    last = -1
    c0, t0 = time.process_time(), time.perf_counter()
    c.assign([TopicPartition(args.topic, 0, 0)])
    next_report = t0 + 1.0
    while n < args.count:
        # never ask for more than is left: consume() waits its timeout for a full batch
        for m in c.consume(num_messages=min(100000, args.count - n), timeout=1.0):
            if m.error():
                raise SystemExit(str(m.error()))
            n += 1
            nbytes += len(m.value())
            last = m.offset()
        now = time.perf_counter()
        if now >= next_report:
            next_report = now + 1.0
            print(f"    kafka consumer: {n:,}/{args.count:,} records", flush=True)
        if now - t0 > args.timeout:
            raise SystemExit(f"kafka consumer: only {n:,} records after {args.timeout} s")
    t1, c1 = time.perf_counter(), time.process_time()
    c.close()
    if nbytes != args.count * args.size or last != args.count - 1:
        raise SystemExit(f"kafka consumer read {n} records / {nbytes} bytes up to offset {last}")
    _result(n, nbytes, t1 - t0, c1 - c0, last_offset=last)
    return 0


# --------------------------------------------------------------------------- NATS JetStream


#: bytes of messages requested and not yet received, at most (the consumer's pull window)
IN_FLIGHT_BYTES = 32 * 1024 * 1024


async def _nats_connect(server: str):
    import nats

    return await nats.connect(server, pending_size=64 * 1024 * 1024, flush_timeout=60,
                              max_reconnect_attempts=0)


async def _nats_produce(args: argparse.Namespace) -> int:
    from nats.js import api

    values = _load(args.file, args.count)
    nc = await _nats_connect(args.server)
    js = nc.jetstream()
    await js.add_stream(api.StreamConfig(
        name=args.stream, subjects=[args.stream], storage=api.StorageType.FILE, num_replicas=1,
        retention=api.RetentionPolicy.LIMITS, discard=api.DiscardPolicy.OLD))
    n = len(values)
    acked = 0
    errors: list[bytes] = []
    done = asyncio.Event()
    window = asyncio.Semaphore(args.window)

    async def on_ack(msg) -> None:
        nonlocal acked
        if b'"error"' in msg.data:
            errors.append(msg.data)
        acked += 1
        window.release()
        if acked == n:
            done.set()

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_ack, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await nc.flush()
    publish, acquire, subject = nc.publish, window.acquire, args.stream
    c0, t0 = time.process_time(), time.perf_counter()
    next_report = t0 + 1.0
    for i, v in enumerate(values):
        await acquire()
        await publish(subject, v, reply=inbox)
        if i % 1000 == 0:
            now = time.perf_counter()
            if now >= next_report:
                next_report = now + 1.0
                print(f"    nats producer: {i:,}/{n:,} published, {acked:,} acknowledged", flush=True)
    await nc.flush()
    await asyncio.wait_for(done.wait(), timeout=120)
    t1, c1 = time.perf_counter(), time.process_time()
    info = await js.stream_info(args.stream)
    await nc.close()
    if errors or info.state.messages != n:
        raise SystemExit(f"stream {args.stream} holds {info.state.messages} messages after {n} "
                         f"publishes; {len(errors)} errors: {errors[:3]}")
    _result(n, sum(map(len, values)), t1 - t0, c1 - c0, stream_messages=info.state.messages,
            stream_bytes=info.state.bytes, window=args.window)
    return 0


async def _nats_consume(args: argparse.Namespace) -> int:
    from nats.js import api

    nc = await _nats_connect(args.server)
    js = nc.jetstream()
    durable = "bench-pull"
    await js.add_consumer(args.stream, api.ConsumerConfig(
        durable_name=durable, ack_policy=api.AckPolicy.NONE, deliver_policy=api.DeliverPolicy.ALL))
    n = args.count
    # Two requests are outstanding: keep them within nats-server's per-client pending limit
    # (64 MB), past which it drops the connection as a slow consumer.
    batch = max(100, min(args.batch, IN_FLIGHT_BYTES // 2 // max(1, args.size)))
    got = nbytes = 0
    requested = 0
    last_seq = 0
    done = asyncio.Event()
    subject = f"$JS.API.CONSUMER.MSG.NEXT.{args.stream}.{durable}"
    request = json.dumps({"batch": batch, "expires": 30_000_000_000}).encode()
    inbox = nc.new_inbox()

    async def on_msg(m) -> None:
        nonlocal got, nbytes, requested, last_seq
        if not m.data and m.headers:  # a status message (request expired, no messages, ...)
            return
        got += 1
        nbytes += len(m.data)
        if got >= n:
            last_seq = m.metadata.sequence.stream
            done.set()
        elif requested - got <= batch // 2 and requested < n:
            requested += batch
            await nc.publish(subject, request, reply=inbox)

    await nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await nc.flush()
    c0, t0 = time.process_time(), time.perf_counter()
    requested = 2 * batch
    await nc.publish(subject, request, reply=inbox)
    await nc.publish(subject, request, reply=inbox)
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), timeout=1.0)
        except TimeoutError:
            print(f"    nats consumer: {got:,}/{n:,} messages", flush=True)
            if not nc.is_connected:
                raise SystemExit(f"nats consumer: the server closed the connection after {got:,} messages")
            if time.perf_counter() - t0 > args.timeout:
                raise SystemExit(f"nats consumer: only {got:,} messages after {args.timeout} s") from None
    t1, c1 = time.perf_counter(), time.process_time()
    await js.delete_consumer(args.stream, durable)
    if args.delete:
        await js.delete_stream(args.stream)
    await nc.close()
    if nbytes != n * args.size or last_seq != n:
        raise SystemExit(f"nats consumer read {got} messages / {nbytes} bytes up to sequence {last_seq}")
    _result(got, nbytes, t1 - t0, c1 - c0, last_sequence=last_seq, batch=batch)
    return 0


def _run_async(coro_fn):
    def run(args: argparse.Namespace) -> int:
        return asyncio.run(coro_fn(args))
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role", required=True)
    p = sub.add_parser("kafka-produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--count", type=int, required=True)
    p.set_defaults(func=kafka_produce)
    p = sub.add_parser("kafka-consume")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(func=kafka_consume)
    p = sub.add_parser("nats-produce")
    p.add_argument("--server", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--window", type=int, default=20000, help="most unacknowledged publishes")
    p.set_defaults(func=_run_async(_nats_produce))
    p = sub.add_parser("nats-consume")
    p.add_argument("--server", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--batch", type=int, default=100000, help="messages per pull request")
    p.add_argument("--delete", action="store_true", help="delete the stream afterwards")
    p.add_argument("--timeout", type=float, default=600)
    p.set_defaults(func=_run_async(_nats_consume))
    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
