"""Produce-to-consume latency: a paced confluent-kafka producer and a consumer.

Two roles, each run as its own process by ``bench/foundation.py``:

    python bench/latency.py consume --bootstrap H:P --topic T --count N --out FILE
    python bench/latency.py produce --bootstrap H:P --topic T --rate R --seconds S --linger-ms L

The producer (acks=1, linger.ms=L: 1 by default, 0 also measured) sends ``rate`` records/s for ``seconds``, each a
100-byte value starting with its sequence number and ``time.time_ns()`` taken just
before ``produce()``. The consumer (fetch.wait.max.ms=100, fetch.min.bytes=1,
reading partition 0 from offset 0 of a fresh topic) stamps ``time.time_ns()`` when
``poll()`` hands it the record and writes ``receive - send`` in nanoseconds for
every record, in sequence order, as little-endian int64 to ``--out``. Both
processes run on one machine, so they share CLOCK_REALTIME.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time

_HEAD = struct.Struct(">qq")  # sequence number, send time (ns since the epoch)
RECORD_SIZE = 100

PRODUCER_CONFIG = {"acks": "1"}
CONSUMER_CONFIG = {"fetch.wait.max.ms": 100, "fetch.min.bytes": 1}


def _produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": args.linger_ms, **PRODUCER_CONFIG})
    pad = b"x" * (RECORD_SIZE - _HEAD.size)
    total = int(args.rate * args.seconds)
    interval = 1.0 / args.rate
    failures = []

    acks: list[int] = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(str(err))
        else:
            acks.append(time.time_ns() - _HEAD.unpack_from(msg.value())[1])

    # Connect and fetch metadata before the clock starts.
    p.list_topics(args.topic, timeout=10)
    start = time.monotonic()
    last_report = start
    for seq in range(total):
        # Sleep (never spin: broker, consumer and producer share two cores) until this
        # record is due; records that fell behind go out at once, so the rate holds.
        due = start + seq * interval
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
            now = time.monotonic()
        p.produce(args.topic, _HEAD.pack(seq, time.time_ns()) + pad, partition=0,
                  on_delivery=on_delivery)
        p.poll(0)
        if now - last_report >= 2.0:
            last_report = now
            print(f"    latency producer: {seq + 1:,}/{total:,} records sent", flush=True)
    elapsed = time.monotonic() - start
    left = p.flush(30)
    print(json.dumps({"sent": total, "seconds": elapsed, "rate": total / elapsed,
                      "undelivered": left, "failures": failures[:5],
                      "failure_count": len(failures), **_ack_percentiles(acks)}), flush=True)
    return 1 if left or failures else 0


def _ack_percentiles(acks: list[int]) -> dict:
    """Produce-to-acknowledgement latency (send to delivery callback), the producer's half."""
    if not acks:
        return {}
    acks = sorted(acks[len(acks) // 10:])  # the first tenth is warm-up, as for the consumer
    at = lambda q: acks[min(len(acks) - 1, int(q * len(acks)))] / 1e6  # noqa: E731
    return {"ack_p50_ms": at(0.50), "ack_p99_ms": at(0.99), "ack_p999_ms": at(0.999)}


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "strata-bench-latency",  # required by librdkafka; no group APIs are used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        **CONSUMER_CONFIG,
    })
    c.assign([TopicPartition(args.topic, 0, 0)])
    lat = [0] * args.count
    got = 0
    deadline = time.monotonic() + args.timeout
    c.poll(0.2)  # let the assignment start fetching before we say we are ready
    print("ready", flush=True)
    last_report = time.monotonic()
    while got < args.count and time.monotonic() < deadline:
        m = c.poll(0.5)
        now_ns = time.time_ns()
        if m is None:
            continue
        if m.error():
            print(f"    latency consumer: {m.error()}", file=sys.stderr, flush=True)
            continue
        seq, sent_ns = _HEAD.unpack_from(m.value())
        lat[seq] = now_ns - sent_ns
        got += 1
        if time.monotonic() - last_report >= 2.0:
            last_report = time.monotonic()
            print(f"    latency consumer: {got:,}/{args.count:,} records received", flush=True)
    c.close()
    with open(args.out, "wb") as f:
        f.write(struct.pack(f"<{args.count}q", *lat))
    print(json.dumps({"received": got}), flush=True)
    return 0 if got == args.count else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--rate", type=float, default=5000)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--linger-ms", type=int, default=1)
    p.set_defaults(func=_produce)
    c = sub.add_parser("consume")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--timeout", type=float, default=120)
    c.set_defaults(func=_consume)
    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
