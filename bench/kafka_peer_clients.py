"""Client processes for ``bench/kafka_peer.py`` that kcat cannot play: a consumer group and
transactional producers. Each role prints a last JSON line (other lines are progress);
the same code drives Strata and Apache Kafka.

    python bench/kafka_peer_clients.py group-consume --bootstrap H:P --topic T --partitions P
                                       --members M --count N
    python bench/kafka_peer_clients.py txn-produce --bootstrap H:P --topic T --count N --per-txn K

group-consume: ``--members`` confluent-kafka consumers, each its own process (two cores
cannot run ten Python consumers in one interpreter's GIL), subscribe to the topic in one
group from the earliest offset, without commits. Each member holds the partitions it is
given paused until the group has formed: every member holds some and together they cover
the topic, unchanged for half a second (``group_formed_seconds`` reports how long that
took). The clock starts then: ten processes joining one by one rebalance the group up to
ten times, and in both systems a member given a partition after a rebalance read it again
from the start (1.8× the records delivered in a run of 2026-11-29), so timing the joins
measured when the forks happened to join more than the brokers. It stops when, for every
partition, some member has read up to the partition's end: the members write the next
offset they read per partition into one shared array, so records read twice neither stop
the clock early nor count twice.

txn-produce: one confluent-kafka producer with a ``transactional.id``; transactions of
``--per-txn`` records of ``--size`` bytes to partition 0, committed back to back; the
clock starts after ``init_transactions``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

GROUP_CONSUMER = {"auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": "10", "max.partition.fetch.bytes": "1048576",
                  "session.timeout.ms": "30000", "partition.assignment.strategy": "range"}


def _member(bootstrap: str, topic: str, group: str, ends: list[int], reached, received, first, stop,
            index: int, owned, formed) -> None:
    """One group member: hold its partitions paused until the whole group has formed (every
    member's assignment reported, ``formed`` set by the parent), then read until every
    partition's end has been reached by someone."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **GROUP_CONSUMER})

    def on_assign(consumer, partitions) -> None:  # type: ignore[no-untyped-def]
        consumer.assign(partitions)
        if not formed.is_set():
            consumer.pause(partitions)
        owned[index] = len(partitions)

    def on_revoke(consumer, partitions) -> None:  # type: ignore[no-untyped-def]
        owned[index] = 0

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not formed.is_set() and not stop.is_set():  # polls keep the member in the group
        c.poll(0.05)
    c.resume(c.assignment())
    got = 0
    while not stop.is_set():
        for m in c.consume(num_messages=10000, timeout=0.2):
            if m.error():
                continue
            if not got and not first.value:
                with first.get_lock():  # perf_counter is CLOCK_MONOTONIC: one clock for every process
                    first.value = first.value or time.perf_counter()
            got += 1
            p, nxt = m.partition(), m.offset() + 1
            if nxt > reached[p]:
                reached[p] = nxt  # one writer per partition at a time, bar rebalances: good enough
        if all(reached[p] >= ends[p] for p in range(len(ends))):
            stop.set()
    with received.get_lock():
        received.value += got
    c.close()


def group_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group + "-probe"})
    ends = [probe.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30, cached=False)[1]
            for p in range(args.partitions)]
    probe.close()
    if sum(ends) != args.count:
        raise SystemExit(f"{args.topic} holds {sum(ends):,} records, not {args.count:,}")
    ctx = mp.get_context("fork")
    reached = ctx.Array("q", args.partitions, lock=False)
    received = ctx.Value("q", 0)
    first = ctx.Value("d", 0.0)
    stop = ctx.Event()
    owned = ctx.Array("q", args.members, lock=False)
    formed = ctx.Event()
    procs = [ctx.Process(target=_member, args=(args.bootstrap, args.topic, args.group, ends, reached,
                                               received, first, stop, n, owned, formed))
             for n in range(args.members)]
    spawned = time.perf_counter()
    for p in procs:
        p.start()
    # timed from a formed group: every member holds partitions and they cover the topic, the
    # same for half a second (members join one by one, and each join rebalances the group)
    steady = None
    while steady is None or time.perf_counter() - steady < 0.5:
        covered = sum(owned) == args.partitions and all(owned[n] > 0 for n in range(args.members))
        steady = (steady or time.perf_counter()) if covered else None
        if time.perf_counter() - spawned > args.timeout:
            stop.set()
            raise SystemExit(f"the group of {args.members} did not form in {args.timeout} s")
        time.sleep(0.02)
    c0 = os.times()
    t0 = time.perf_counter()
    formed.set()
    while not stop.wait(1.0):
        done = sum(min(reached[p], ends[p]) for p in range(args.partitions))
        print(f"    group: {done:,}/{args.count:,} records read", flush=True)
        if time.perf_counter() - t0 > args.timeout:
            stop.set()
            raise SystemExit(f"group read {done:,} of {args.count:,} records in {args.timeout} s")
    t1 = time.perf_counter()
    for p in procs:
        p.join(60)
    c1 = os.times()
    cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    print(json.dumps({"records": args.count, "bytes": args.count * args.size, "seconds": t1 - t0,
                      "client_cpu_seconds": cpu, "delivered": received.value,
                      "first_record_seconds": first.value - t0,
                      "records_per_s_after_first": args.count / (t1 - first.value),
                      "group_formed_seconds": t0 - spawned, "members": args.members}), flush=True)
    return 0


def txn_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": f"peer-{args.topic}",
                  "linger.ms": "5"})
    p.init_transactions(60)
    p.list_topics(args.topic, timeout=10)
    value = b"x" * args.size
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(args.count // args.per_txn):
        p.begin_transaction()
        for _ in range(args.per_txn):
            while True:
                try:
                    p.produce(args.topic, value, partition=0)
                    break
                except BufferError:
                    p.poll(0.001)
        p.commit_transaction(60)
    t1, c1 = time.perf_counter(), time.process_time()
    n = args.count // args.per_txn * args.per_txn
    print(json.dumps({"records": n, "bytes": n * args.size, "seconds": t1 - t0,
                      "client_cpu_seconds": c1 - c0}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role", required=True)
    g = sub.add_parser("group-consume")
    g.add_argument("--bootstrap", required=True)
    g.add_argument("--topic", required=True)
    g.add_argument("--group", default="peer-group")
    g.add_argument("--partitions", type=int, required=True)
    g.add_argument("--members", type=int, default=10)
    g.add_argument("--count", type=int, required=True)
    g.add_argument("--size", type=int, required=True, help="bytes per record (value and key)")
    g.add_argument("--timeout", type=float, default=600)
    g.set_defaults(func=group_consume)
    t = sub.add_parser("txn-produce")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--per-txn", type=int, default=1000)
    t.add_argument("--size", type=int, default=100)
    t.set_defaults(func=txn_produce)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
