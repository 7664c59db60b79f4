"""A broker killed with SIGKILL loses no acknowledged record and repairs a torn log tail."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

from . import helpers


class BackgroundProducer(threading.Thread):
    """Produces ``value-<n>`` records (acks=all) to partition 0 until stopped.

    ``acked`` maps each acknowledged value to its offset (delivery callback
    without error); failed deliveries are counted, not retried.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = helpers.producer(
            bootstrap, **{"acks": "all", "linger.ms": 2, "message.timeout.ms": 5000,
                          "queue.buffering.max.messages": 20_000})
        self.acked: dict[bytes, int] = {}
        self.failed = 0
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.value()] = msg.offset()
            else:
                self.failed += 1

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            try:
                self.producer.produce(self.topic, value=b"value-%d" % n, partition=0,
                                      on_delivery=self._on_delivery)
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if n % 100 == 0 else 0)
        # Let in-flight records finish (acked or failed by message.timeout.ms).
        self.producer.flush(30)


def test_acknowledged_records_survive_kill_9(start_broker: Any) -> None:
    broker = start_broker()
    topic = helpers.topic_name("crash-acked")
    helpers.create_topic(broker.bootstrap, topic, partitions=1)

    producer = BackgroundProducer(broker.bootstrap, topic)
    producer.start()
    try:
        deadline = time.monotonic() + 120
        while producer.acked_count() < 5000:
            assert producer.is_alive()
            assert time.monotonic() < deadline, f"only {producer.acked_count()} acks in 120 s"
            time.sleep(0.05)
        broker.kill()  # SIGKILL while the producer is still sending
        time.sleep(0.5)
    finally:
        producer.stop_event.set()
        producer.join(60)
    assert not producer.is_alive()
    acked = dict(producer.acked)
    assert len(acked) >= 5000

    broker.start()
    low, high = helpers.watermarks(broker.bootstrap, topic)
    assert low == 0
    assert high >= len(acked)
    msgs = helpers.consume(broker.bootstrap, topic, [0], high)
    assert [m.offset() for m in msgs] == list(range(high))
    by_offset = {m.offset(): m.value() for m in msgs}
    lost = [v for v, off in acked.items() if by_offset.get(off) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"


def newest_segment(data_dir: Path, topic: str) -> Path:
    """The active (newest) segment file of ``topic`` partition 0 under the data dir."""
    candidates = [p for p in data_dir.rglob("*.log") if p.parent.name == f"{topic}-0"]
    if not candidates:
        candidates = list(data_dir.rglob("*.log"))
    assert candidates, f"no .log segment under {data_dir}: {sorted(data_dir.rglob('*'))}"
    # Segment names are 20-digit base offsets: the highest is the active segment.
    return max(candidates, key=lambda p: (p.parent.name == f"{topic}-0", p.stem, p.stat().st_mtime))


def test_garbage_after_the_last_batch_is_truncated_on_restart(start_broker: Any) -> None:
    broker = start_broker()
    topic = helpers.topic_name("crash-garbage")
    helpers.create_topic(broker.bootstrap, topic, partitions=1)
    values = [b"record-%d" % i for i in range(1000)]
    offsets = helpers.produce_values(broker.bootstrap, topic, values)
    assert offsets == list(range(1000))

    broker.kill()  # no clean-shutdown marker: recovery must scan the tail
    segment = newest_segment(broker.data_dir, topic)
    size_before = segment.stat().st_size
    # A plausible batch header (base offset 1000, length 4000) followed by junk: a torn write.
    garbage = struct.pack(">qi", 1000, 4000) + os.urandom(211)
    with open(segment, "ab") as f:
        f.write(garbage)
    assert segment.stat().st_size == size_before + len(garbage)

    broker.start()
    assert helpers.watermarks(broker.bootstrap, topic) == (0, 1000)
    msgs = helpers.consume(broker.bootstrap, topic, [0], 1000)
    assert [m.value() for m in msgs] == values
    assert [m.offset() for m in msgs] == list(range(1000))
    assert "truncat" in broker.log_text().lower(), broker.log_tail()

    more = helpers.produce_values(broker.bootstrap, topic, [b"after-%d" % i for i in range(10)])
    assert more == list(range(1000, 1010))
    msgs = helpers.consume(broker.bootstrap, topic, [0], 1010)
    assert [m.value() for m in msgs] == values + [b"after-%d" % i for i in range(10)]


def test_restart_after_clean_stop_keeps_everything(start_broker: Any) -> None:
    broker = start_broker()
    topic = helpers.topic_name("clean-restart")
    helpers.create_topic(broker.bootstrap, topic, partitions=2)
    values = [b"v%d" % i for i in range(500)]
    assert helpers.produce_values(broker.bootstrap, topic, values, partition=1) == list(range(500))

    assert broker.stop() == 0
    broker.start()

    assert helpers.watermarks(broker.bootstrap, topic, 1) == (0, 500)
    assert helpers.watermarks(broker.bootstrap, topic, 0) == (0, 0)
    msgs = helpers.consume(broker.bootstrap, topic, [0, 1], 500)
    assert [m.value() for m in msgs] == values
