"""Spark reads a diskless topic straight from the bucket (issue 35, ADR 0027, section 7).

A diskless topic's records reach tiered segments by the sequencer's merge, in the classic
layout: Spark's bucket reader, the JVM one and the Python one, reads them with no broker
running, and gets exactly what the producer was acknowledged for, at the same offsets.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.commit import current_document
from remote_tier.manifest import ManifestStore
from remote_tier.s3 import S3ObjectStore
from tests.e2e import helpers
from tests.s3_fixtures import TEST_ACCESS_KEY, TEST_SECRET_KEY
from tests.spark.test_spark_source import JVM, PYTHON

PREFIX = "diskless-spark"
SETS = {
    "diskless.batch.ms": "30",
    "diskless.commit.deadline.ms": "1000",
    "diskless.orphan.grace.ms": "4000",
    "diskless.merge.interval.ms": "500",
}


@pytest.mark.parametrize("source", [JVM, PYTHON], ids=["jvm", "python"])
def test_spark_reads_a_diskless_topic_from_the_bucket(spark: Any, start_broker: Any, s3_bucket: Any,
                                                      source: str) -> None:
    broker = start_broker(sets=SETS, args=["--object-store", f"s3://{s3_bucket.bucket}/{PREFIX}",
                                           "--s3-endpoint", s3_bucket.endpoint_url])
    topic = helpers.topic_name("diskless-spark")
    helpers.create_topic(broker.bootstrap, topic, partitions=2, config={"diskless.enable": "true"})
    acked = {p: helpers.produce_values(broker.bootstrap, topic, [b"%d-%d" % (p, i) for i in range(300)], p,
                                       **{"compression.type": "zstd", "linger.ms": 20})
             for p in (0, 1)}
    store = S3ObjectStore(s3_bucket.bucket, PREFIX, endpoint_url=s3_bucket.endpoint_url)
    metadata = helpers.admin(broker.bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert len(metadata.partitions) == 2
    manifests = ManifestStore(store, "")
    topic_id = next(t["topic_id"] for t in current_document(store)["topics"] if t["name"] == topic)

    def merged(p: int) -> int:
        loaded = manifests.load(topic_id, p)
        return loaded[0].next_offset if loaded is not None else 0

    helpers.wait_until(lambda: all(merged(p) == 300 for p in (0, 1)), "both partitions merged", timeout=60)
    broker.stop()  # from here on, no broker: Spark reads the bucket alone
    df = (spark.read.format(source).option("object.store", f"s3://{s3_bucket.bucket}/{PREFIX}")
          .option("s3.endpoint", s3_bucket.endpoint_url).option("s3.accessKey", TEST_ACCESS_KEY)
          .option("s3.secretKey", TEST_SECRET_KEY).option("s3.region", "us-east-1")
          .option("subscribe", topic)
          .option("endingOffsets", json.dumps({topic: {"0": 300, "1": 300}})).load())
    rows = df.select("partition", "offset", "value").collect()
    got = {(r.partition, int(r.offset)): bytes(r.value) for r in rows}
    assert len(rows) == len(got) == 600
    want = {(p, offset): b"%d-%d" % (p, i) for p in (0, 1) for i, offset in enumerate(acked[p])}
    assert got == want

