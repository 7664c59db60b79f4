"""A stream over a topic deleted and created again under its name between two micro-batches.

The checkpoint held the old topic's offsets (30 here); the new topic started at 0 and had 5
records. The stream asked for everything from offset 30 on: it read nothing, and would
have skipped the new topic's first 30 records once it got there, without a word. Now the
offsets carry each topic's id: the stream fails, as Spark's Kafka source does on data
loss, or with ``failOnDataLoss=false`` reads the new topic from its start.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException

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
