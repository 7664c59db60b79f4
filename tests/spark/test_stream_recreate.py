"""A stream over a topic deleted and created again under its name between two micro-batches.

The checkpoint held the old topic's offsets (30 here); the new topic started at 0 and had 5
records. The stream asked for everything from offset 30 on: it read nothing, and would
have skipped the new topic's first 30 records once it got there, without a word. Now the
offsets carry each topic's id: the stream fails, as Spark's Kafka source does on data
loss, or with ``failOnDataLoss=false`` reads the new topic from its start.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException

from spark.options import StrataSourceError, parse_options
from tests.e2e import helpers
from tests.s3_fixtures import TEST_ACCESS_KEY, TEST_SECRET_KEY
from tests.spark.test_spark_source import _rows, _value, _values, live  # noqa: F401 - live is a fixture

TOPIC = "reborn"


def _stream(spark: Any, b: Any, out: str, checkpoint: str, **options: str) -> Any:
    reader = (spark.readStream.format("strata").option("object.store", b.store)
              .option("s3.endpoint", b.moto.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
              .option("s3.secretKey", TEST_SECRET_KEY).option("subscribe", TOPIC)
              .option("kafka.bootstrap.servers", b.bootstrap).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
        return query.exception()
    except StreamingQueryException as exc:
        return exc
    finally:
        query.stop()


def test_a_stream_over_a_topic_created_again_fails_or_reads_the_new_topic_from_its_start(
        spark: Any, live: Any, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    b = live
    helpers.create_topic(b.bootstrap, TOPIC)
    _values(b.bootstrap, TOPIC, 0, 0, 30)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    assert _stream(spark, b, out, checkpoint) is None
    assert [r[2] for r in _rows(spark.read.parquet(out))] == list(range(30))

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics([TOPIC])[TOPIC].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # the name is free once the deletion is committed
        try:
            admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result(timeout=30)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    _values(b.bootstrap, TOPIC, 0, 100, 5)  # the new topic: offsets 0-4

    failed = _stream(spark, b, out, checkpoint)
    assert failed is not None and "deleted and created again" in str(failed), failed
    assert _stream(spark, b, out, checkpoint, failOnDataLoss="false") is None
    got = sorted((r[2], r[4]) for r in _rows(spark.read.parquet(out)))
    old, new = [(i, _value(0, i)) for i in range(30)], [(i, _value(0, 100 + i)) for i in range(5)]
    assert got == sorted(old + new)  # the old topic's 30, then the new topic's 5 from offset 0


def test_a_batch_planned_before_a_restart_is_not_read_from_a_topic_created_again_since(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Spark replays the last planned batch after a restart with the offsets it planned: both
    name the old topic's id. A topic created again while the stream was down is not the same
    records: the stream fails, or with failOnDataLoss=false skips them (the next batch starts
    the new topic at its log start)."""
    from spark import source
    from spark.catalog import PartitionView

    old_id, new_id = str(uuid.uuid4()), str(uuid.uuid4())
    views = [PartitionView(TOPIC, 0, 0, 0, 5, (), (), (), new_id)]
    monkeypatch.setattr(source, "_catalog", lambda opts: SimpleNamespace(
        views=lambda: views, broker=None, split=lambda slices, _n: slices,
        opts=SimpleNamespace(min_partitions=None, jvm=False)))
    start = {TOPIC: {"0": 10}, "@topic_ids": {TOPIC: old_id}}
    end = {TOPIC: {"0": 30}, "@topic_ids": {TOPIC: old_id}}
    options = {"object.store": tmp_path.as_uri(), "subscribe": TOPIC}
    strict = source.StrataStreamReader(parse_options(options, streaming=True))
    with pytest.raises(StrataSourceError, match="deleted and created again"):
        strict.partitions(start, end)
    lenient = source.StrataStreamReader(parse_options({**options, "failOnDataLoss": "false"}, streaming=True))
    assert lenient.partitions(start, end) == []


def test_trigger_available_now_reads_only_what_was_there_when_the_run_started(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The end of an AvailableNow run is what each partition held at its start. A partition
    added since, or the partition of a topic created again since, was capped by name or not
    at all: the run read past its target."""
    from spark import source
    from spark.catalog import PartitionView

    old_id, new_id = str(uuid.uuid4()), str(uuid.uuid4())
    views = [PartitionView(TOPIC, 0, 0, 0, 10, (), (), (), old_id)]
    monkeypatch.setattr(source, "_catalog", lambda opts: SimpleNamespace(views=lambda: views, broker=None))
    reader = source.StrataStreamReader(parse_options({"object.store": tmp_path.as_uri(), "subscribe": TOPIC,
                                                      "failOnDataLoss": "false"}, streaming=True))
    reader.prepareForTriggerAvailableNow()  # the run's end: offset 10 of partition 0
    views[:] = [PartitionView(TOPIC, 0, 0, 0, 25, (), (), (), old_id),
                PartitionView(TOPIC, 1, 0, 0, 7, (), (), (), old_id)]  # written since, and a partition added
    start = {TOPIC: {"0": 0}, "@topic_ids": {TOPIC: old_id}}
    assert reader.latestOffset(start, None) == {TOPIC: {"0": 10, "1": 0}, "@topic_ids": {TOPIC: old_id}}
    views[:] = [PartitionView(TOPIC, 0, 0, 0, 3, (), (), (), new_id)]  # created again since
    assert reader.latestOffset({TOPIC: {"0": 10}, "@topic_ids": {TOPIC: old_id}}, None) == \
        {TOPIC: {"0": 0}, "@topic_ids": {TOPIC: new_id}}
