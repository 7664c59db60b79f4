"""ListOffsets of a diskless partition whose records are not merged yet (the default:
merges run 60 s after the oldest entry)."""

from __future__ import annotations

from pathlib import Path

from common.record.batch import validate_batches
from service.diskless.offsets import list_offset
from tests.service.diskless.broker_harness import batch, diskless_topic, run

BASE = 1_700_000_000_000


def test_list_offsets_by_time_and_max_timestamp_see_unmerged_records(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d")
        for i in range(3):
            records = batch([b"r%d" % i], BASE + i * 1000)
            await broker.diskless.produce(info, 0, records, validate_batches(records, max_message_bytes=1 << 20),
                                          False)
        by_time = await list_offset(broker.diskless, info, 0, BASE + 1500)
        max_ts = await list_offset(broker.diskless, info, 0, -3)
        latest = await list_offset(broker.diskless, info, 0, -1)
        return by_time, max_ts, latest

    by_time, max_ts, latest = run(tmp_path, body)
    assert latest[1] == 3
    assert by_time[:2] == (BASE + 2000, 2), by_time
    assert max_ts[:2] == (BASE + 2000, 2), max_ts
