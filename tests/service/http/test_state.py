"""The picture of a partition's log (service/http/state.py) on real logs and a real RemoteLogManager:
remote, local and both ranges and bytes, and upload lag that counts sealed segments only."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

from common.record.batch import build_batch
from local_tier.log import Log
from remote_tier import FileSystemObjectStore
from remote_tier.log_manager import RemoteLogManager
from service.http.state import partition_state, topic_totals
from tests.remote_tier.test_log_manager import FakeBroker, _config

TOPIC = "picture"


def _append(log: Log, batches: int) -> None:
    now = int(time.time() * 1000)
    for _ in range(batches):
        start = log.log_end_offset
        log.append_as_leader(build_batch([(None, b"v" * 200, [], now + start + i) for i in range(10)]), 0)
    log.update_high_watermark(log.log_end_offset)
    deadline = time.monotonic() + 10  # the rolls' producer snapshots are written: an upload waits for
    while log.background_pending and time.monotonic() < deadline:  # them (a CI run uploaded nothing)
        time.sleep(0.005)


def _sealed(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, next base offset, bytes) of every sealed segment."""
    segs = log.segments
    return [(s.base_offset, n.base_offset, s.size) for s, n in itertools.pairwise(segs)]


def test_upload_lag_counts_sealed_segments_only_and_both_is_the_overlap(tmp_path: Path) -> None:
    config = _config()
    broker: Any = FakeBroker(tmp_path, config)
    broker.tiering = RemoteLogManager(FileSystemObjectStore(tmp_path / "bucket"), config)
    try:
        (log,) = broker.create_topic(TOPIC)
        _append(log, 40)
        sealed = _sealed(log)
        assert len(sealed) >= 3 and log.active_segment.size > 0

        before = partition_state(broker, TOPIC, 0)  # nothing uploaded yet
        assert before["remote_log_start_offset"] is None and before["remote_next_offset"] is None
        assert before["upload_lag_offsets"] == log.active_segment.base_offset < log.high_watermark
        assert before["upload_lag_bytes"] == sum(size for _, _, size in sealed)
        assert before["active_segment_bytes"] == log.active_segment.size
        assert before["local_and_remote_bytes"] == 0

        asyncio.run(broker.tiering.run_once(broker))  # every sealed segment goes up
        uploaded = partition_state(broker, TOPIC, 0)
        assert (uploaded["upload_lag_offsets"], uploaded["upload_lag_bytes"]) == (0, 0)
        assert uploaded["remote_next_offset"] == log.active_segment.base_offset
        assert uploaded["local_and_remote_bytes"] == uploaded["remote_bytes"] == before["upload_lag_bytes"]

        _append(log, 20)  # more sealed segments, not uploaded yet
        pending = [s for s in _sealed(log) if s[0] >= uploaded["remote_next_offset"]]
        assert pending
        later = partition_state(broker, TOPIC, 0)
        assert later["upload_lag_offsets"] == pending[-1][1] - pending[0][0]
        assert later["upload_lag_bytes"] == sum(size for _, _, size in pending)
        assert later["local_and_remote_bytes"] == uploaded["local_and_remote_bytes"]

        # local retention (local.retention.bytes=0) drops local copies the bucket holds
        log.delete_retention_segments(int(time.time() * 1000),
                                      remote_boundary=broker.tiering.remote_boundary(TOPIC, 0))
        after = partition_state(broker, TOPIC, 0)
        assert after["local_log_start_offset"] == later["remote_next_offset"] > after["remote_log_start_offset"] == 0
        assert after["local_and_remote_bytes"] == 0 and after["log_start_offset"] == 0
        assert after["local_bytes"] == later["upload_lag_bytes"] + after["active_segment_bytes"]

        totals = topic_totals([after, later])
        assert totals["hosted_partitions"] == 2
        assert totals["upload_lag_bytes"] == after["upload_lag_bytes"] + later["upload_lag_bytes"]
        assert totals["records"] == 2 * log.high_watermark
    finally:
        broker.tiering.close()
        broker.close()
