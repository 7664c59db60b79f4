"""ListOffsets by timestamp on tiered data (issue 32, item 6), end to end: a broker on a
real S3 endpoint (moto's server over HTTP) with a 32 MiB segment only in the bucket, and
confluent-kafka's ``offsets_for_times``. Each lookup costs the segment's two index
objects once and then one small ranged GET of the ``.log``; before, the broker walked
the segment's batch headers from byte 0 in 1 MiB GETs (the whole segment for its last
record). The answers are exact: the first offset whose timestamp is at or after the
target, across both tiers, with the leader epoch of the record found (the records
before the restart keep theirs), -1 past the end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from tests.e2e import helpers

SEGMENT_BYTES = 32 * 1024 * 1024
VALUE = b"v" * 1000
BEFORE_RESTART = 36_000  # about 37 MB: one sealed segment, the rest in the active one
AFTER_RESTART = 200
BASE = int(time.time() * 1000) - 100_000  # record i has timestamp BASE + 2i


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    p = helpers.producer(bootstrap, **{"linger.ms": 20, "batch.size": 16384, "compression.type": "none"})
    for i in range(first, first + count):
        p.produce(topic, value=VALUE, partition=0, timestamp=BASE + 2 * i)
        if i % 5000 == 4999:
            p.flush(30)
    assert p.flush(30) == 0


def _local_start(data_dir: Path, topic: str) -> int:
    return min(int(p.stem) for p in (data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _segment_gets(server: Any, since: int) -> list[tuple[str, int]]:
    """(object kind, bytes) of the GETs of segment objects since GET number ``since``."""
    kinds = (".log", ".index", ".timeindex")
    return [(path.rsplit(".", 1)[1], size) for path, size in server.gets[since:] if path.endswith(kinds)]


def test_timestamps_in_a_large_tiered_segment_take_a_few_small_gets_and_answer_exactly(
    start_broker: Any, s3_bucket: Any, moto_server: Any
) -> None:
    endpoint, bucket = s3_bucket
    sets = {
        "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.local.retention.bytes": "0",  # the sealed segment lives only in the bucket
        "log.segment.delete.delay.ms": "0",
    }
    args = ["--object-store", f"s3://{bucket}/c", "--s3-endpoint", endpoint]
    b = start_broker(sets=sets, args=args)
    topic = helpers.topic_name("tiered-ts")
    helpers.create_topic(b.bootstrap, topic)
    _produce(b.bootstrap, topic, 0, BEFORE_RESTART)
    b.restart()  # a new leader epoch for what comes next
    _produce(b.bootstrap, topic, BEFORE_RESTART, AFTER_RESTART)
    local_start = helpers.wait_until(
        lambda: (s := _local_start(b.data_dir, topic)) > 0 and s, "the sealed segment to leave the disk"
    )
    assert 30_000 < local_start < BEFORE_RESTART

    total = BEFORE_RESTART + AFTER_RESTART
    wanted = {
        "before the first": (BASE - 1_000, 0),
        "first": (BASE, 0),
        "between two records": (BASE + 2 * 12_345 + 1, 12_346),
        "middle": (BASE + 2 * (local_start // 2), local_start // 2),
        "last in the bucket": (BASE + 2 * (local_start - 1), local_start - 1),
        "first on disk": (BASE + 2 * local_start, local_start),
        "after the restart": (BASE + 2 * (total - 5), total - 5),
        "beyond the end": (BASE + 2 * total, -1),
    }
    c = helpers.consumer(b.bootstrap)
    answers, costs = {}, {}
    try:
        for name, (timestamp, _) in wanted.items():
            since = len(moto_server.gets)
            (answers[name],) = c.offsets_for_times([TopicPartition(topic, 0, timestamp)], timeout=30)
            costs[name] = _segment_gets(moto_server, since)
    finally:
        c.close()
    for name, (_, offset) in wanted.items():
        assert answers[name].error is None and answers[name].offset == offset, (name, answers[name])

    summary = {name: (len(gets), sum(n for _, n in gets)) for name, gets in costs.items()}
    print("segment-object GETs (count, bytes) per lookup:", summary)
    for name, gets in costs.items():
        log_gets = [n for kind, n in gets if kind == "log"]
        assert len(gets) <= 3 and len(log_gets) <= 1 and sum(log_gets) <= 256 * 1024, (name, gets)
    assert sum(n for _, n in summary.values()) < 1024 * 1024, summary

    # the records as a consumer reads them, with their leader epochs (read afterwards: the
    # reads warm the broker's chunk cache, which the lookups must not get for free)
    epochs = {offset: m.leader_epoch() for offset, m in _records(b.bootstrap, topic, wanted)}
    assert epochs[0] != epochs[total - 5], "the restart gave the partition no new leader epoch"
    for name, (_, offset) in wanted.items():
        if offset >= 0:
            assert answers[name].leader_epoch == epochs[offset], (name, answers[name], epochs[offset])


def _records(bootstrap: str, topic: str, wanted: dict[str, tuple[int, int]]) -> list[tuple[int, Any]]:
    """The records at the offsets expected, as a consumer reads them (with their epochs)."""
    out = []
    c = helpers.consumer(bootstrap)
    try:
        for _, offset in wanted.values():
            if offset < 0:
                continue
            c.assign([TopicPartition(topic, 0, offset)])
            msg = None
            deadline = time.monotonic() + 30
            while msg is None and time.monotonic() < deadline:
                msg = c.poll(1)
            assert msg is not None and msg.error() is None and msg.offset() == offset, msg
            assert msg.timestamp()[1] == BASE + 2 * offset
            out.append((offset, msg))
    finally:
        c.close()
    return out
