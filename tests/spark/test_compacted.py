"""Spark reads of a compacted tiered topic (ADR 0019): the bucket's compacted log, with
offset gaps and empty batches, equals the latest value per key; a read planned before the
bucket is compacted again reads the objects it planned (kept for the grace period), so its
result is exactly the log as it was when it was planned.

Both readers: the JVM one through Spark, and the Python one driven the way Spark drives it
(plan on the driver, read each slice), which lets the test read a plan after the swap.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from spark.options import parse_options
from spark.source import StrataBatchReader
from tests.conftest import BrokerProcess
from tests.e2e.helpers import create_topic, producer, wait_until
from tests.e2e.test_compaction import fillers, random_history, read_all
from tests.e2e.test_remote_compaction import COMPACTED_TIERED, TIERED_FAST, local_logs, manifest_of

TOPIC = "compacted-history"
PAUSE = "remote-uploaded"  # the remote cleaner stops with its cleaned objects uploaded, unpublished

Rows = list[tuple[int, bytes | None, bytes | None]]


def _marker(broker: BrokerProcess) -> Any:
    return broker.data_dir / "logs" / f"cleaner-paused-{PAUSE}"


def _resume(broker: BrokerProcess) -> None:
    _marker(broker).unlink()


def _options(broker: BrokerProcess) -> dict[str, str]:
    return {"subscribe": TOPIC, "object.store": f"file://{broker.data_dir}/bucket"}


def _python_plan(broker: BrokerProcess) -> tuple[StrataBatchReader, list[Any]]:
    reader = StrataBatchReader(parse_options(_options(broker), streaming=False))
    return reader, reader.partitions()


def _python_read(reader: StrataBatchReader, parts: list[Any]) -> Rows:
    rows: Rows = []
    for part in parts:
        for batch in reader.read(part):
            cols = batch.to_pydict()
            rows += zip(cols["offset"], cols["key"], cols["value"], strict=True)
    return sorted(rows)


def _spark_rows(rows: Any) -> Rows:
    return sorted((r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
                  for r in rows)


class Compacted:
    """The topic's produced records, by key: the model."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.latest: dict[bytes, tuple[int, bytes | None]] = {}

    def produce(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Produce and note each key's latest offset; the last offset produced."""
        p = producer(self.broker.bootstrap, **{"batch.size": 1500})
        acked: list[tuple[int, bytes, bytes | None]] = []
        for key, value in records:
            p.produce(TOPIC, key=key, value=value, partition=0,
                      on_delivery=lambda err, msg: acked.append((msg.offset(), msg.key(), msg.value()))
                      if err is None else None)
            p.poll(0)
        assert p.flush(30) == 0 and len(acked) == len(records)
        for offset, key, value in sorted(acked, key=lambda a: a[0]):
            self.latest[key] = (offset, value)
        return max(o for o, _, _ in acked)

    def expected(self, below: int) -> Rows:
        """The latest value per key among offsets below ``below`` (tombstones gone)."""
        return sorted((o, k, v) for k, (o, v) in self.latest.items() if o < below and v is not None)

    def is_compacted(self, rows: Rows, below: int) -> bool:
        """``rows`` hold exactly the latest value of each key below ``below``, and otherwise
        only tombstones that are their key's latest record (a later pass removes them)."""
        values = sorted(r for r in rows if r[2] is not None)
        tombstones = [r for r in rows if r[2] is None]
        return values == self.expected(below) and all(self.latest.get(k) == (o, None) for o, k, _ in tombstones)


def _settle(state: Compacted) -> None:
    """Let the remote cleaner run (resuming it at each pause) until the bucket is the model."""
    broker = state.broker

    def settled() -> bool:
        if _marker(broker).exists():
            _resume(broker)
            return False
        return state.is_compacted(_python_read(*_python_plan(broker)), _remote_end(broker))

    wait_until(settled, "the bucket compacted to the latest value per key", timeout=60, interval=0.3)


def _remote_end(broker: BrokerProcess) -> int:
    m = manifest_of(broker, TOPIC)
    return int(m["segments"][-1]["last_offset"]) + 1 if m and m["segments"] else 0


@pytest.fixture(scope="module")
def compacted(module_start_broker: Any) -> Iterator[Compacted]:
    broker = module_start_broker(sets={**TIERED_FAST, "remote.log.compaction.object.retention.ms": "120000",
                                       "log.cleaner.test.pause.at": PAUSE})
    create_topic(broker.bootstrap, TOPIC, config={**COMPACTED_TIERED, "delete.retention.ms": "0"})
    state = Compacted(broker)
    last = state.produce(random_history(random.Random(6), 30, 400, b"first"))
    state.produce(fillers("seal-1"))
    wait_until(lambda: _remote_end(broker) > last and len(local_logs(broker, TOPIC)) == 1,
               "the records tiered, local copies gone", timeout=40, interval=0.2)
    _settle(state)
    yield state


def test_a_spark_read_of_a_compacted_bucket_equals_the_latest_value_per_key(spark: Any, compacted: Compacted) -> None:
    broker = compacted.broker
    end = _remote_end(broker)
    want = compacted.expected(end)
    got = _spark_rows(spark.read.format("strata").options(**_options(broker)).load().collect())
    assert compacted.is_compacted(got, end) and len(want) > 30
    assert got[-1][0] - got[0][0] + 1 > len(got)  # offsets with gaps
    # and a consumer through the broker (the bucket, then the disk's active segment)
    through_broker = sorted(read_all(broker.bootstrap, TOPIC))
    assert [r for r in through_broker if r[0] < end] == got
    assert compacted.is_compacted(through_broker, 1 << 62)


def test_a_read_planned_before_the_bucket_is_compacted_again_reads_what_it_planned(
    spark: Any, compacted: Compacted
) -> None:
    broker = compacted.broker
    last = compacted.produce(random_history(random.Random(7), 30, 300, b"second"))
    compacted.produce(fillers("seal-2"))
    wait_until(lambda: _remote_end(broker) > last, "the second round tiered", timeout=40, interval=0.2)
    # every pass that uploads stops before its swap and none was let go since the second
    # round was produced: the bucket holds that round uncompacted, and the paused pass
    # (whichever it is) will swap out segments the plans below read
    wait_until(_marker(broker).exists, "a remote compaction paused before its swap", timeout=40, interval=0.2)
    before = manifest_of(broker, TOPIC)
    assert before is not None
    rdd = spark.read.format("strata").options(**_options(broker)).load().rdd
    assert rdd.getNumPartitions() >= 1  # Spark plans now, from the current manifest
    reader, parts = _python_plan(broker)
    snapshot = _python_read(*_python_plan(broker))  # the log as the plans saw it
    _resume(broker)
    wait_until(lambda: (m := manifest_of(broker, TOPIC)) and m["revision"] > before["revision"]
               and {s["upload_id"] for s in m["segments"]} != {s["upload_id"] for s in before["segments"]},
               "the second compaction swapped in", timeout=40, interval=0.2)
    replaced = {r["upload_id"] for r in manifest_of(broker, TOPIC)["replaced"]}  # type: ignore[index]
    assert replaced & {s["upload_id"] for s in before["segments"]}
    # both plans read the replaced objects, kept for the grace period: the old log, whole
    assert _spark_rows(rdd.collect()) == snapshot
    assert _python_read(reader, parts) == snapshot
    # a new read sees the log compacted again
    _settle(compacted)
    after = _spark_rows(spark.read.format("strata").options(**_options(broker)).load().collect())
    assert compacted.is_compacted(after, _remote_end(broker))
    assert after != snapshot
