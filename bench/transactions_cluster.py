"""Exactly-once processing on three brokers: transaction commit latency, markers, fencing.

    python bench/transactions_cluster.py [--seconds 60] [--rate 2000] [--processors 2]

The load of a quixstreams-style exactly-once application (issue #31): a feeder writes
``--rate`` records/s to a 6-partition input topic (RF 3, ``min.insync.replicas=2``);
``--processors`` consume-transform-produce loops, each a consumer in one group and a
transactional producer, read up to 500 records or 100 ms, write one output record per
input record to the same partition of the output topic (RF 3), add the consumed offsets
to the transaction (``send_offsets_to_transaction``), flush and commit. Reported: the commit
latency (``commit_transaction`` after the flush) and the flush's percentiles; the COMMIT and ABORT markers found on every
output partition against the transactions that wrote there (a marker written twice, or
one for a partition the transaction did not write, shows); and the brokers fenced while
alive (their logs' "fencing broker(s)").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import tests.conftest  # noqa: E402,F401  (first: conftest imports the cluster fixtures)
from tests.cluster_fixtures import Cluster  # noqa: E402
from tests.e2e.rawtxn import control_markers  # noqa: E402

PARTITIONS = 6


class Processor(threading.Thread):
    """One consume-transform-produce loop committing a transaction per poll batch."""

    def __init__(self, bootstrap: str, n: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self._stop_event = stop
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-bench",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"eos-{n}",
                                  "linger.ms": 5})
        self.commits_ms: list[float] = []  # EndTxn alone
        self.flushes_ms: list[float] = []  # the records' acknowledgements before it
        self.written: Counter[int] = Counter()  # output partition -> committed txns writing it
        self.errors: list[str] = []

    def run(self) -> None:
        self.producer.init_transactions(60)
        self.consumer.subscribe(["eos-in"])
        while not self._stop_event.is_set():
            msgs = [m for m in self.consumer.consume(500, timeout=0.1) if m.error() is None]
            if not msgs:
                continue
            try:
                self.producer.begin_transaction()
                parts = {m.partition() for m in msgs}
                for m in msgs:
                    self.producer.produce("eos-out", m.value().upper(), partition=m.partition())
                self.producer.send_offsets_to_transaction(
                    self.consumer.position(self.consumer.assignment()),
                    self.consumer.consumer_group_metadata(), 30)
                started = time.perf_counter()
                self.producer.flush(60)  # the transaction's records, acks=all
                flushed = time.perf_counter()
                self.producer.commit_transaction(60)
                self.flushes_ms.append((flushed - started) * 1000)
                self.commits_ms.append((time.perf_counter() - flushed) * 1000)
                self.written.update(parts)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                self.errors.append(repr(exc))
                try:
                    self.producer.abort_transaction(30)
                except Exception:  # noqa: BLE001
                    pass
        self.consumer.close()


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--seconds", type=float, default=60)
    args.add_argument("--rate", type=int, default=2000, help="input records/s")
    args.add_argument("--processors", type=int, default=2)
    opts = args.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), 3)
        cluster.start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            topics = [NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                      for t in ("eos-in", "eos-out")]
            for f in admin.create_topics(topics).values():
                f.result(30)
            time.sleep(2)
            stop = threading.Event()
            processors = [Processor(cluster.bootstrap, n, stop) for n in range(opts.processors)]
            for p in processors:
                p.start()
            feeder = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
            end = time.monotonic() + opts.seconds
            sent = 0
            print(f"feeding {opts.rate} records/s for {opts.seconds:.0f} s ...", flush=True)
            while time.monotonic() < end:
                tick = time.monotonic()
                for _ in range(opts.rate // 10):
                    feeder.produce("eos-in", b"r%d" % sent, partition=sent % PARTITIONS)
                    sent += 1
                feeder.poll(0)
                time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
            feeder.flush(60)
            time.sleep(3)
            stop.set()
            for p in processors:
                p.join(60)
            commits = sorted(ms for p in processors for ms in p.commits_ms)
            written: Counter[int] = Counter()
            for p in processors:
                written.update(p.written)
            md = admin.list_topics("eos-out", timeout=30).topics["eos-out"].partitions
            found = {part: Counter(control_markers(cluster.brokers[md[part].leader].bootstrap,
                                                   "eos-out", part))
                     for part in range(PARTITIONS)}
            logs = "".join((Path(tmp) / f"broker-{n}.log").read_text(errors="replace") for n in (1, 2, 3))
        finally:
            cluster.close()
    p99 = commits[max(0, int(len(commits) * 0.99) - 1)]
    print(f"input records {sent}, transactions committed {len(commits)}, "
          f"failed {sum(len(p.errors) for p in processors)}")
    print(f"commit latency ms: p50 {statistics.median(commits):.1f}  p99 {p99:.1f}  max {commits[-1]:.1f}")
    flushes = sorted(ms for p in processors for ms in p.flushes_ms)
    both = sorted(f + c for p in processors for f, c in zip(p.flushes_ms, p.commits_ms, strict=True))
    print(f"flush + commit ms: p50 {statistics.median(both):.1f}  "
          f"p99 {both[max(0, int(len(both) * 0.99) - 1)]:.1f}  max {both[-1]:.1f}")
    print(f"flush before it ms: p50 {statistics.median(flushes):.1f}  "
          f"p99 {flushes[max(0, int(len(flushes) * 0.99) - 1)]:.1f}  max {flushes[-1]:.1f}")
    twice = 0
    for part in range(PARTITIONS):
        commit_markers = sum(n for (_, kind), n in found[part].items() if kind == 1)
        abort_markers = sum(n for (_, kind), n in found[part].items() if kind == 0)
        twice += max(0, commit_markers - written[part])
        print(f"eos-out-{part}: transactions writing it {written[part]}, COMMIT markers "
              f"{commit_markers}, ABORT markers {abort_markers}")
    print(f"markers beyond one per transaction and partition: {twice}")
    print(f"brokers fenced while alive: {logs.count('fencing broker(s)')}")


if __name__ == "__main__":
    main()
