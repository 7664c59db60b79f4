"""Small confluent-kafka helpers shared by the end-to-end tests.

Consumers never join a group: librdkafka requires a ``group.id`` but partitions
are assigned by hand and nothing is committed (the broker has no group
coordinator yet).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLIENT_TIMEOUT_S = 15.0
_counter = itertools.count()


def topic_name(prefix: str) -> str:
    """A fresh, valid topic name starting with ``prefix``."""
    clean = re.sub(r"[^a-zA-Z0-9._-]", "-", prefix)[:180]
    return f"{clean}-{next(_counter)}"


def admin(bootstrap: str) -> AdminClient:
    """An AdminClient; hold on to it until its futures are resolved."""
    return AdminClient({"bootstrap.servers": bootstrap})


def topic_names(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S).topics)


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)  # keep a reference: the futures die with the client
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=CLIENT_TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=CLIENT_TIMEOUT_S + 5)
    wait_for_topic(bootstrap, name, partitions)


def wait_for_topic(bootstrap: str, name: str, partitions: int,
                   timeout: float = CLIENT_TIMEOUT_S) -> None:
    """Until metadata shows ``name`` with ``partitions`` partitions, each with a leader."""
    client = admin(bootstrap)
    deadline = time.monotonic() + timeout
    while True:
        md = client.list_topics(timeout=CLIENT_TIMEOUT_S)
        topic = md.topics.get(name)
        if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {name} not ready: {topic and topic.partitions}")
        time.sleep(0.1)


def producer(bootstrap: str, **overrides: Any) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 30_000}
    conf.update(overrides)
    return Producer(conf)


def produce_values(bootstrap: str, topic: str, values: Iterable[bytes], partition: int = 0,
                   key: bytes | None = None, **overrides: Any) -> list[int]:
    """Produce to one partition (every record with ``key``: compacted topics refuse keyless
    records), wait for every ack; the offsets, in produce order."""
    p = producer(bootstrap, **overrides)
    results: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        results.append(err if err is not None else msg.offset())

    count = 0
    for value in values:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        count += 1
        p.poll(0)
    assert p.flush(60) == 0, "records still in flight after 60 s"
    errors = [r for r in results if isinstance(r, KafkaError)]
    assert not errors, errors[:3]
    assert len(results) == count
    return [int(r) for r in results]


def consumer(bootstrap: str, **overrides: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": "strata-e2e-unused",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": False}
    conf.update(overrides)
    return Consumer(conf)


def consume(bootstrap: str, topic: str, partitions: Sequence[int], count: int,
            timeout: float = 60.0, start: int = OFFSET_BEGINNING, **overrides: Any) -> list[Any]:
    """Exactly ``count`` messages from ``partitions`` (from ``start``); fails on errors."""
    c = consumer(bootstrap, **overrides)
    try:
        c.assign([TopicPartition(topic, p, start) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"consumed {len(out)} of {count} from {topic} in {timeout}s")
            for msg in c.consume(num_messages=min(10_000, count - len(out)), timeout=0.5):
                err = msg.error()
                if err is not None:
                    raise AssertionError(f"consumer error: {err}")
                out.append(msg)
        # nothing beyond what was expected
        extra = [m for m in c.consume(num_messages=100, timeout=0.5) if m.error() is None]
        assert not extra, f"{len(extra)} unexpected records after the expected {count}"
        return out
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(earliest offset, latest offset) through ListOffsets."""
    c = consumer(bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition),
                                            timeout=CLIENT_TIMEOUT_S)
        return int(low), int(high)
    finally:
        c.close()


def wait_until(predicate: Any, what: str, timeout: float = 60.0, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def s3_keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    """Every key under ``prefix``, sorted."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def join_and_commit(bootstrap: str, group: str, topic: str, count: int, **conf: Any) -> Consumer:
    """A live member of ``group`` (the client's default protocol unless ``conf`` says) that
    has consumed ``count`` records of ``topic`` and committed its position on every partition."""
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    member.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < count:
        assert time.monotonic() < deadline, f"{group} consumed {got} of {count}"
        for msg in member.consume(num_messages=count - got, timeout=0.2):
            assert msg.error() is None, msg.error()
            got += 1
    member.commit(asynchronous=False)
    return member
