"""Tiered storage end to end: a broker on a real S3 endpoint (moto's server over
HTTP), sealed segments uploaded and published, local copies removed, and history
served back from the bucket to real Kafka clients."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.conftest import subprocess_env
from tests.e2e import helpers

SEGMENT_BYTES = 64 * 1024
RECORDS = 4000
VALUE = b"v" * 150


def _keys(endpoint: str, bucket: str, prefix: str = "") -> list[str]:
    return helpers.s3_keys(helpers.s3_client(endpoint), bucket, prefix)


def _local_segments(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / "logs" / f"{topic}-0").glob("*.log"))


def tiered_sets(segment_bytes: int) -> dict[str, str]:
    """A broker that tiers every sealed segment within a fraction of a second and keeps only
    the active one on its disk."""
    return {
        "log.segment.bytes": str(segment_bytes),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.local.retention.bytes": "0",  # keep only the active segment locally
        "log.segment.delete.delay.ms": "0",
    }


@pytest.fixture
def tiered_broker(start_broker: Any, s3_bucket: Any) -> Any:
    endpoint, bucket = s3_bucket
    broker = start_broker(
        sets=tiered_sets(SEGMENT_BYTES),
        args=["--object-store", f"s3://{bucket}/cluster-a", "--s3-endpoint", endpoint],
    )
    broker.endpoint, broker.bucket = endpoint, bucket
    return broker


def _produce(bootstrap: str, topic: str) -> int:
    """Produce RECORDS records with timestamps base + i (recent: retention keeps them)."""
    base = int(time.time() * 1000) - RECORDS
    helpers.create_topic(bootstrap, topic)
    p = helpers.producer(bootstrap, **{"linger.ms": 0, "batch.num.messages": 20})
    for i in range(RECORDS):
        p.produce(topic, key=b"k%d" % i, value=VALUE + b"%d" % i, partition=0,
                  timestamp=base + i, headers=[("i", b"%d" % i)])
        if i % 500 == 499:
            p.flush(30)
    assert p.flush(30) == 0
    return base


def test_sealed_segments_move_to_the_bucket_and_history_reads_back(tiered_broker: Any) -> None:
    b = tiered_broker
    topic = helpers.topic_name("tiered")
    base = _produce(b.bootstrap, topic)

    # the manifest lists the uploaded segments; their objects are in the bucket
    def manifest() -> Any:
        keys = [k for k in _keys(b.endpoint, b.bucket, "cluster-a/topics/") if k.endswith("manifest.json")]
        if not keys:
            return None
        doc = json.loads(helpers.s3_client(b.endpoint).get_object(Bucket=b.bucket, Key=keys[0])["Body"].read())
        return doc if len(doc["segments"]) >= 5 else None

    doc = helpers.wait_until(manifest, "segments in the manifest")
    assert doc["format_version"] == 2 and doc["topic"] == topic and doc["partition"] == 0
    segments = doc["segments"]
    assert segments[0]["base_offset"] == 0
    for prev, nxt in zip(segments, segments[1:]):
        assert nxt["base_offset"] == prev["last_offset"] + 1  # dense, no gaps
    objects = _keys(b.endpoint, b.bucket, "cluster-a/topics/")
    for seg in segments:
        for suffix in (".log", ".index", ".timeindex"):
            assert any(k.endswith(f"{seg['base_offset']:020d}-{seg['upload_id']}{suffix}") for k in objects)

    # local copies of uploaded segments are removed (local.retention.bytes=0)
    helpers.wait_until(lambda: len(_local_segments(b.data_dir, topic)) <= 2, "local segments to be deleted")
    first_local = int(_local_segments(b.data_dir, topic)[0].stem)
    assert first_local > 0

    # `strata topics describe` and the admin API show both tiers
    out = subprocess.run(
        [sys.executable, "-m", "service", "topics", "describe", topic, "-b", b.bootstrap,
         "--admin-url", b.admin_url],
        capture_output=True, text=True, timeout=60, env=subprocess_env(), check=True,
    ).stdout
    row = dict(re.findall(r"(\w+): (\S+)", out.splitlines()[1]))
    assert row["EarliestOffset"] == "0" and row["RemoteStart"] == "0"
    assert int(row["LocalStart"]) == first_local and int(row["RemoteBytes"]) > 0
    with urllib.request.urlopen(f"{b.admin_url}/v1/topics/{topic}/partitions", timeout=10) as resp:
        (state,) = json.load(resp)["partitions"]
    assert state["remote_segments"] >= 5 and state["log_start_offset"] == 0
    listed = json.loads(helpers.s3_client(b.endpoint).get_object(Bucket=b.bucket, Key=[
        k for k in _keys(b.endpoint, b.bucket, "cluster-a/topics/") if k.endswith("manifest.json")
    ][0])["Body"].read())["segments"]
    assert state["remote_next_offset"] == listed[-1]["last_offset"] + 1
    # upload lag counts the sealed segments between the bucket and the active one, never
    # the active segment (it is uploaded once it rolls)
    assert state["upload_lag_offsets"] == state["active_segment_base_offset"] - state["remote_next_offset"]
    assert state["active_segment_base_offset"] < RECORDS and state["active_segment_bytes"] > 0

    # the log still starts at 0 for clients; everything reads back identical
    assert helpers.watermarks(b.bootstrap, topic) == (0, RECORDS)
    msgs = helpers.consume(b.bootstrap, topic, [0], RECORDS)
    assert [m.offset() for m in msgs] == list(range(RECORDS))
    assert [m.value() for m in msgs] == [VALUE + b"%d" % i for i in range(RECORDS)]
    assert [m.key() for m in msgs] == [b"k%d" % i for i in range(RECORDS)]
    assert [m.headers() for m in msgs[:3]] == [[("i", b"0")], [("i", b"1")], [("i", b"2")]]
    assert [m.timestamp()[1] for m in msgs[:2]] == [base, base + 1]

    # a second, independent client reads the same history from the bucket
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None,
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 10)
        got = []
        for m in consumer:
            got.append((m.offset, m.value))
            if len(got) == 100:
                break
    finally:
        consumer.close()
    assert got == [(i, VALUE + b"%d" % i) for i in range(10, 110)]


def test_list_offsets_by_timestamp_reaches_remote_segments(tiered_broker: Any) -> None:
    b = tiered_broker
    topic = helpers.topic_name("tiered-time")
    base = _produce(b.bootstrap, topic)
    helpers.wait_until(lambda: int(_local_segments(b.data_dir, topic)[0].stem) > 200, "local start to move")
    from confluent_kafka import TopicPartition

    c = helpers.consumer(b.bootstrap)
    try:
        (found,) = c.offsets_for_times([TopicPartition(topic, 0, base + 123)], timeout=15)
    finally:
        c.close()
    assert found.offset == 123


def test_history_survives_a_broker_restart_and_deleting_the_topic_empties_the_bucket(
    tiered_broker: Any,
) -> None:
    b = tiered_broker
    topic = helpers.topic_name("tiered-restart")
    _produce(b.bootstrap, topic)
    helpers.wait_until(lambda: len(_local_segments(b.data_dir, topic)) <= 2, "local segments to be deleted")
    b.kill()
    b.start()
    msgs = helpers.consume(b.bootstrap, topic, [0], RECORDS)
    assert [m.offset() for m in msgs] == list(range(RECORDS))

    client = helpers.admin(b.bootstrap)
    client.delete_topics([topic])[topic].result(timeout=15)
    helpers.wait_until(lambda: not _keys(b.endpoint, b.bucket, "cluster-a/topics/"), "remote data to be deleted")
