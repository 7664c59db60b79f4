"""Tiered reads do not hold up the live tail, and do not run the broker out of memory.

* A consumer at the live tail keeps receiving every new record, in order, while
  two other consumers read the whole history from the bucket.
* With ``remote.log.reader.cpus``, the threads that read history from the bucket
  and send it run on that CPU alone, and every record arrives.
* Clients that ask for history and stop reading hold up no other history reader,
  and their going away mid-response leaves the broker serving.
* A hundred consumers reading the history from the bucket at once: the broker's
  resident memory stays within a bound derived from its configuration (the chunk
  cache, one response per tiered-fetch thread, one response per connection), and
  every consumer gets every record.

Real parts: a broker subprocess on moto's S3 server over HTTP, confluent-kafka
clients. The latency ratio itself is measured by the benchmark (bench/), not here.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.conftest import BrokerProcess
from tests.e2e import helpers
from tests.s3_fixtures import S3Bucket

PREFIX = "cluster-a"
MiB = 1024 * 1024


def _value(i: int, size: int) -> bytes:
    head = b"%08d:" % i
    return head + b"h" * (size - len(head))


def _tiered_broker(start_broker: Any, s3_bucket: S3Bucket, **extra: str) -> BrokerProcess:
    endpoint, bucket = s3_bucket
    return start_broker(
        sets={
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            "log.local.retention.bytes": "0",
            "log.segment.delete.delay.ms": "0",
            **extra,
        },
        args=["--object-store", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", endpoint],
    )


def _local_bases(data_dir: Path, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _fill_and_tier(b: BrokerProcess, topic: str, count: int, size: int) -> None:
    """Produce ``count`` records and wait until all but the active segment left the disk."""
    helpers.create_topic(b.bootstrap, topic)
    helpers.produce_values(b.bootstrap, topic, (_value(i, size) for i in range(count)),
                           **{"batch.size": 64 * 1024, "linger.ms": 5})
    deadline = time.monotonic() + 120
    while True:
        bases = _local_bases(b.data_dir, topic)
        if len(bases) == 1 and bases[0] > count // 2:
            break
        assert time.monotonic() < deadline, f"history not tiered: local segments {bases}"
        time.sleep(0.2)


def _consumer(bootstrap: str, **overrides: Any) -> Consumer:
    return helpers.consumer(bootstrap, **{"fetch.wait.max.ms": 100, **overrides})


class Reader(threading.Thread):
    """Reads ``topic``-0 from ``start`` until ``count`` records, checking order and values."""

    def __init__(self, bootstrap: str, topic: str, start: int, count: int,
                 check: Callable[[int, bytes], bool], **conf: Any) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.start_offset, self.count = bootstrap, topic, start, count
        self.check, self.conf = check, conf
        self.got = 0
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            c = _consumer(self.bootstrap, **self.conf)
            try:
                c.assign([TopicPartition(self.topic, 0, self.start_offset)])
                deadline = time.monotonic() + 150
                expected = self.start_offset
                while self.got < self.count and self.error is None:
                    if time.monotonic() > deadline:
                        self.error = f"read {self.got} of {self.count} in time"
                        break
                    for msg in c.consume(num_messages=500, timeout=0.5):
                        if msg.error() is not None:
                            self.error = str(msg.error())
                            break
                        if msg.offset() != expected or not self.check(msg.offset(), msg.value()):
                            self.error = f"offset {msg.offset()} (expected {expected}) is wrong"
                            break
                        expected += 1
                        self.got += 1
                        if self.got == self.count:
                            break
            finally:
                c.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test thread
            self.error = repr(exc)
        finally:
            self.done.set()


def test_tail_consumer_keeps_receiving_while_others_read_history_from_the_bucket(
    start_broker: Any, s3_bucket: S3Bucket
) -> None:
    size = 1024
    history = 6000  # ~6 MB tiered in 256 KiB segments
    b = _tiered_broker(start_broker, s3_bucket, **{"log.segment.bytes": str(256 * 1024)})
    topic = helpers.topic_name("isolation")
    _fill_and_tier(b, topic, history, size)

    def is_history(offset: int, value: bytes) -> bool:
        return value == _value(offset, size)

    # the tail consumer starts at the end of the log: it must see only new records
    assert helpers.watermarks(b.bootstrap, topic) == (0, history)
    tail_values: list[tuple[int, bytes]] = []
    stop_tail = threading.Event()

    def tail() -> None:
        c = _consumer(b.bootstrap)
        try:
            c.assign([TopicPartition(topic, 0, history)])
            while not stop_tail.is_set():
                for msg in c.consume(num_messages=100, timeout=0.2):
                    assert msg.error() is None, msg.error()
                    tail_values.append((msg.offset(), msg.value()))
        finally:
            c.close()

    tail_thread = threading.Thread(target=tail, daemon=True)
    tail_thread.start()

    readers = [Reader(b.bootstrap, topic, 0, history, is_history) for _ in range(2)]
    producer = helpers.producer(b.bootstrap, **{"linger.ms": 0})
    produced: list[bytes] = []
    acked: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append(msg.offset())

    for r in readers:
        r.start()
    # a steady trickle of live records (200/s) for as long as the history reads run
    while not all(r.done.is_set() for r in readers) or len(produced) < 50:
        value = b"live-%06d" % len(produced)
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        produced.append(value)
        producer.poll(0)
        time.sleep(0.005)
    assert producer.flush(30) == 0
    for r in readers:
        r.join(30)
        assert r.error is None and r.got == history, (r.error, r.got)

    deadline = time.monotonic() + 60
    while len(tail_values) < len(produced) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop_tail.set()
    tail_thread.join(30)
    assert acked == list(range(history, history + len(produced)))
    assert [v for _, v in tail_values] == produced  # every live record, in order, once
    assert [o for o, _ in tail_values] == acked


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_hundred_consumers_reading_history_keep_the_broker_memory_bounded(
    start_broker: Any, s3_bucket: S3Bucket
) -> None:
    consumers = 100
    size = 8 * 1024
    records = 3000  # ~24 MB tiered
    cache_bytes = 16 * MiB
    chunk_bytes = 1 * MiB
    reader_threads = 4
    partition_fetch_bytes = 512 * 1024  # each consumer's fetch.max.bytes
    b = _tiered_broker(start_broker, s3_bucket, **{
        "log.segment.bytes": str(2 * MiB),
        "remote.fetch.chunk.cache.bytes": str(cache_bytes),
        "remote.fetch.chunk.bytes": str(chunk_bytes),
        "remote.log.reader.threads": str(reader_threads),
    })
    topic = helpers.topic_name("hundred")
    _fill_and_tier(b, topic, records, size)

    def is_record(offset: int, value: bytes) -> bool:
        return value == _value(offset, size)

    readers = [
        Reader(b.bootstrap, topic, 0, records, is_record,
               **{"fetch.max.bytes": partition_fetch_bytes,
                  "message.max.bytes": partition_fetch_bytes,
                  "max.partition.fetch.bytes": partition_fetch_bytes,
                  "queued.max.messages.kbytes": 1024,
                  "fetch.wait.max.ms": 500})
        for _ in range(consumers)
    ]
    baseline = _rss_bytes(b.pid)
    peak = baseline
    for r in readers:
        r.start()
    while not all(r.done.is_set() for r in readers):
        peak = max(peak, _rss_bytes(b.pid))
        time.sleep(0.05)
    peak = max(peak, _rss_bytes(b.pid))
    for r in readers:
        r.join(10)
    failed = [(i, r.error, r.got) for i, r in enumerate(readers) if r.error or r.got != records]
    assert not failed, failed[:5]

    # What the broker may hold for tiered reads, from its configuration: the chunk
    # cache; per tiered-fetch thread, one response being assembled (the chunk
    # slices and their join) and one chunk being loaded; one finished response per
    # connection (a consumer has one fetch in flight); and slack for the
    # allocator, the connections' buffers and the Python heap. Reads that pile up
    # instead (every retried fetch queuing another read) overshoot it.
    bound = (cache_bytes
             + reader_threads * (2 * partition_fetch_bytes + chunk_bytes)
             + consumers * partition_fetch_bytes
             + 64 * MiB)
    growth = peak - baseline
    print(f"broker RSS: baseline {baseline / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB, "
          f"growth {growth / MiB:.0f} MiB, bound {bound / MiB:.0f} MiB")
    assert growth < bound, f"RSS grew {growth / MiB:.0f} MiB, over the {bound / MiB:.0f} MiB bound"


def _threads_by_cpus(pid: int) -> dict[str, int]:
    """How many of the process's threads may run on each CPU list ("0-1", "1", ...)."""
    counts: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                cpus = line.split(":", 1)[1].strip()
                counts[cpus] = counts.get(cpus, 0) + 1
    return counts


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_history_threads_run_on_remote_log_reader_cpus_and_serve_every_record(
    start_broker: Any, s3_bucket: S3Bucket
) -> None:
    size = 1024
    history = 3000
    history_cpu = str(max(os.sched_getaffinity(0)))
    b = _tiered_broker(start_broker, s3_bucket, **{"log.segment.bytes": str(256 * 1024),
                                                  "remote.log.reader.cpus": history_cpu,
                                                  "remote.log.reader.threads": "3"})
    topic = helpers.topic_name("pinned")
    _fill_and_tier(b, topic, history, size)
    assert b.proc is not None
    assert history_cpu not in _threads_by_cpus(b.proc.pid)  # no history read yet

    readers = [Reader(b.bootstrap, topic, 0, history, lambda o, v: v == _value(o, size)) for _ in range(2)]
    for r in readers:
        r.start()
    for r in readers:
        r.join(150)
        assert r.error is None and r.got == history, (r.error, r.got)

    counts = _threads_by_cpus(b.proc.pid)
    # tiered-fetch threads (at most 3) and history-send threads ran, each pinned; the
    # event loop and every other thread still may run anywhere
    assert 2 <= counts.get(history_cpu, 0) <= 6, counts
    assert sum(n for cpus, n in counts.items() if cpus != history_cpu) >= 1, counts


def test_consumers_that_stop_reading_history_do_not_hold_up_other_history_readers(
    start_broker: Any, s3_bucket: S3Bucket
) -> None:
    from tests.e2e import rawkafka

    size = 1024
    history = 6000
    b = _tiered_broker(start_broker, s3_bucket, **{"log.segment.bytes": str(256 * 1024),
                                                  "remote.log.reader.threads": "2"})
    topic = helpers.topic_name("stalled")
    _fill_and_tier(b, topic, history, size)

    # six clients (three times the history-send threads) ask for 4 MiB of history,
    # three requests each, with small receive buffers, and never read the answers
    stalled = []
    body = rawkafka.fetch_v4_body(topic, 0, 0, max_bytes=4 * MiB, partition_max_bytes=4 * MiB)
    for _ in range(6):
        conn = rawkafka.Connection.to(b.bootstrap)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for i in range(3):
            conn.send_raw(rawkafka.request(rawkafka.API_FETCH, 4, i + 1, body))
        stalled.append(conn)
    time.sleep(1.0)  # their responses are read from the bucket and stuck in their sockets
    try:
        started = time.monotonic()
        reader = Reader(b.bootstrap, topic, 0, history, lambda o, v: v == _value(o, size))
        reader.start()
        reader.join(60)
        assert reader.error is None and reader.got == history, (reader.error, reader.got)
        # far below the 120 s after which a stalled client is cut off
        assert time.monotonic() - started < 30
        # the stalled clients are still connected, their responses waiting for them
        first = stalled[0].read_frame()
        assert first is not None and struct.unpack_from(">i", first)[0] == 1
    finally:
        for conn in stalled:
            conn.sock.close()
    # and the broker serves on after they went away mid-response
    again = Reader(b.bootstrap, topic, 0, history, lambda o, v: v == _value(o, size))
    again.start()
    again.join(60)
    assert again.error is None and again.got == history, (again.error, again.got)
