"""History read from a file:// bucket (the embedded default) goes to the consumer with
``sendfile`` from the segment objects' files, as local segments do: the broker GETs
only the small remote indexes, never the records (issue #34: a copy of every byte into
memory, then a second into the socket, held catch-up reads to 0.87x Kafka's rate).

Real parts: a broker subprocess with ``--object-store file://...``, confluent-kafka
consumers (read_uncommitted and read_committed), the broker's /metrics.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e import helpers
from tests.e2e.test_tiering import tiered_sets

SEGMENT_BYTES = 256 * 1024
RECORDS = 2000
VALUE_BYTES = 1024


def _value(i: int) -> bytes:
    head = b"%06d:" % i
    return head + b"v" * (VALUE_BYTES - len(head))


def _get_bytes(broker: Any) -> float:
    """``strata_object_store_bytes_total{op="get"}``: bytes the broker read with GETs."""
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.search(r'^strata_object_store_bytes_total\{op="get"\} (\S+)$', text, re.M)
    assert found is not None, "no object store GET bytes in /metrics"
    return float(found.group(1))


def _local_bases(data_dir: Path, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (data_dir / "logs" / f"{topic}-0").glob("*.log"))


def test_history_from_a_file_bucket_is_sent_from_its_files_not_read_into_memory(
    start_broker: Any, tmp_path: Path
) -> None:
    broker = start_broker(
        sets=tiered_sets(SEGMENT_BYTES),
        args=["--object-store", (tmp_path / "bucket").as_uri()],
    )
    topic = helpers.topic_name("file-history")
    helpers.create_topic(broker.bootstrap, topic)
    producer = helpers.producer(broker.bootstrap, **{"linger.ms": 5, "batch.size": 64 * 1024})
    for i in range(RECORDS):
        producer.produce(topic, value=_value(i), partition=0)
    assert producer.flush(30) == 0
    first_local = helpers.wait_until(
        lambda: (bases := _local_bases(broker.data_dir, topic)) and bases[0] >= RECORDS // 2 and bases[0],
        "the older half of the log only in the bucket", 60,
    )

    before = _get_bytes(broker)
    for isolation in ("read_uncommitted", "read_committed"):
        msgs = helpers.consume(broker.bootstrap, topic, [0], RECORDS, **{"isolation.level": isolation})
        assert [m.offset() for m in msgs] == list(range(RECORDS)), isolation
        assert [m.value() for m in msgs] == [_value(i) for i in range(RECORDS)], isolation
    got = _get_bytes(broker) - before
    from_bucket = 2 * first_local * VALUE_BYTES  # both consumers read these from the bucket
    print(f"{from_bucket} bytes of history served with {got:.0f} bytes of GETs")
    assert got < 64 * 1024  # the offset indexes (a few KiB), no records
