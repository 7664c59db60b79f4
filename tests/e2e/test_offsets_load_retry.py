"""A failed load of a ``__consumer_offsets`` partition is retried (issue 32, item 5).

The broker comes up with a damaged batch in a sealed segment of its only offsets
partition (a record length that no longer matches its record: the CRC fails, the
record cannot be decoded); its load fails and the group answers
COORDINATOR_LOAD_IN_PROGRESS. Once the bytes are good again the next attempt loads
the partition and the group's committed offset is served, by the same broker, with
no change of leadership. (Before, the failed load was logged once and the partition
stayed "loading" until its leadership moved: never, on a single broker.)
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import BrokerFactory
from tests.e2e.helpers import create_topic
from tests.e2e.rawgroups import offset_commit, offset_fetch
from tests.e2e.rawkafka import Connection

NONE, COORDINATOR_LOAD_IN_PROGRESS = 0, 14
BATCH_OVERHEAD = 61  # a v2 batch header; the first record's length varint follows it
COMMITS = 30


def _offsets_segments(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "logs" / "__consumer_offsets-0").glob("*.log"))


def _patch(path: Path, position: int, value: bytes) -> None:
    """Write ``value`` at ``position`` in place (the broker keeps the file open)."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(value)


def _fetch(conn: Connection, group: str) -> tuple[int, dict[tuple[str, int], int]]:
    return offset_fetch(conn, group, {"jobs": [0]})


def test_a_failed_offsets_load_is_retried_and_the_group_served_without_a_leadership_move(
    start_broker: BrokerFactory,
) -> None:
    broker = start_broker(sets={
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": "1024",  # several segments: the damaged one is sealed
        "log.cleaner.enable": "false",  # the segments stay as written
    })
    create_topic(broker.bootstrap, "jobs", partitions=1)
    with Connection.to(broker.bootstrap) as conn:
        for offset in range(1, COMMITS + 1):
            assert offset_commit(conn, "workers", -1, "", {("jobs", 0): offset}) == {("jobs", 0): NONE}
        assert _fetch(conn, "workers") == (NONE, {("jobs", 0): COMMITS})
    broker.stop()

    segments = _offsets_segments(broker.data_dir)
    assert len(segments) >= 3, segments
    damaged = segments[0]  # sealed: a start checks the headers of its batches, not their records
    good = damaged.read_bytes()[BATCH_OVERHEAD : BATCH_OVERHEAD + 1]
    _patch(damaged, BATCH_OVERHEAD, b"\x02")  # the first record's length: 1 byte
    broker.start()

    with Connection.to(broker.bootstrap, timeout=15) as conn:
        # a request waits up to 5 s for a load in progress before it answers
        assert _fetch(conn, "workers") == (COORDINATOR_LOAD_IN_PROGRESS, {})
        assert "loading __consumer_offsets-0 failed" in broker.log_text()
        _patch(damaged, BATCH_OVERHEAD, good)
        deadline = time.monotonic() + 15
        while (answer := _fetch(conn, "workers"))[0] == COORDINATOR_LOAD_IN_PROGRESS:
            assert time.monotonic() < deadline, "the group is still loading after its bytes were repaired"
            time.sleep(0.1)
        assert answer == (NONE, {("jobs", 0): COMMITS})
        # and the group takes commits again, on the same broker
        assert offset_commit(conn, "workers", -1, "", {("jobs", 0): 99}) == {("jobs", 0): NONE}
        assert _fetch(conn, "workers") == (NONE, {("jobs", 0): 99})
    assert broker.running
    assert "loaded __consumer_offsets-0 at attempt" in broker.log_text()
