"""Fetch of diskless partitions through the real handler: an error answers a long poll at once, and a mixed Fetch keeps to max_bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.errors import ErrorCode
from tests.service.diskless.broker_harness import diskless_topic, run
from tests.service.diskless.test_fetch_wiring import _fetch, _produce, _request, captured  # noqa: F401


def test_a_partition_error_answers_a_diskless_long_poll_at_once(tmp_path: Path, captured: list[Any]) -> None:  # noqa: F811
    async def body(broker):  # noqa: ANN001, ANN202
        await diskless_topic(broker, "d")
        # partition 0 idle; partition 7 does not exist (UNKNOWN_TOPIC_OR_PARTITION)
        return await _fetch(broker, _request([("d", 0, 0), ("d", 7, 0)], max_wait_ms=3000), captured)

    elapsed = run(tmp_path, body)
    codes = {d.partition: d.error_code for d in captured[-1]}
    assert codes[7] != ErrorCode.none
    assert elapsed < 1.5, f"an errored partition, yet the Fetch was held {elapsed:.2f}s"


def test_a_mixed_fetch_keeps_to_max_bytes(tmp_path: Path, captured: list[Any]) -> None:  # noqa: F811
    from common.record.batch import build_batch

    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d")
        await broker.create_topic("c", num_partitions=1)
        await _produce(broker, info, 0, [b"D" * 100_000])
        records = build_batch([(None, b"C" * 100_000, (), 1_700_000_000_000)])
        log = broker.log_for("c", 0)
        from common.record.batch import validate_batches
        log.append_as_leader(records, 0, validate_batches(records, max_message_bytes=1 << 20))
        log.update_high_watermark(1)
        return await _fetch(broker, _request([("d", 0, 0), ("c", 0, 0)], max_wait_ms=0, max_bytes=120_000),
                            captured)

    run(tmp_path, body)
    sizes = {d.topic: d.size for d in captured[-1]}
    assert sizes["d"] > 100_000
    assert sizes["c"] == 0, f"{sizes}: the classic partition's batch went past max_bytes=120000"
