"""Log compaction through a real broker: the latest value per key, tombstones, compact,delete,
keyless records, kill -9 in the middle of a clean, and compacted topics created on the defaults."""

from __future__ import annotations

import json
import random
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import KafkaError
from confluent_kafka.admin import ConfigResource

from service.handlers.router import api_table
from tests.conftest import BrokerFactory, BrokerProcess
from tests.e2e.helpers import (
    CLIENT_TIMEOUT_S,
    admin,
    consumer,
    create_topic,
    producer,
    topic_name,
    wait_until,
    watermarks,
)
from tests.service.cli.helpers import describe_partitions, ok, strata
from tests.service.kafka_wire import WireConnection, example_request, records

INVALID_RECORD = 87

FAST_CLEANER = {"log.cleaner.backoff.ms": "100"}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
    "remote.storage.enable": "false",
}

Model = dict[bytes, bytes | None]


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
            timestamp_ms: int = 0) -> None:
    """Produce (acks=all; librdkafka's default producer is not idempotent) and wait for every
    acknowledgement; ``timestamp_ms``: every record's CreateTime (0: now)."""
    p = producer(bootstrap, **{"batch.size": 1500})  # batches well below segment.bytes
    failed: list[KafkaError] = []
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, timestamp=timestamp_ms,
                  on_delivery=lambda err, msg: failed.append(err) if err else None)
        p.poll(0)
    assert p.flush(30) == 0
    assert not failed, failed[:3]


def read_all(bootstrap: str, topic: str, **overrides: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the log start to the end (read_committed, the default: the LSO)."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, **{"enable.partition.eof": True, **overrides})
    try:
        c.assign([TopicPartition(topic, 0, -2)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"no end of {topic} within 30 s")
    finally:
        c.close()


def random_history(rnd: random.Random, keys: int, count: int, prefix: bytes) -> list[tuple[bytes, bytes | None]]:
    return [
        (b"key-%d" % rnd.randrange(keys), None if rnd.random() < 0.15 else prefix + b"-%d" % i + b"x" * rnd.randrange(60))
        for i in range(count)
    ]


def fillers(tag: str, count: int = 40) -> list[tuple[bytes, bytes]]:
    """Records of keys seen nowhere else, enough to roll the segment the data is in."""
    return [(f"{tag}-{i}".encode(), b"f" * 80) for i in range(count)]


def expected(model: Model) -> list[tuple[bytes, bytes]]:
    return sorted((k, v) for k, v in model.items() if v is not None)


def compacted_view(rows: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple[bytes | None, bytes | None]]:
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    return sorted(((k, v) for _, k, v in rows), key=lambda kv: (kv[0] or b"", kv[1] or b""))


def clean_twice(bootstrap: str, topic: str, model: Model, tag: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """After ``model``'s records: seal them, wait for the first clean (the latest value per key,
    tombstones kept), then past delete.retention.ms seal again and wait for the tombstones to
    go; the rows then read (``model`` gains the sealing records)."""
    produce(bootstrap, topic, fillers(f"{tag}-a"))
    model.update(fillers(f"{tag}-a"))
    with_tombstones = sorted(model.items(), key=lambda kv: (kv[0], kv[1] or b""))
    wait_until(lambda: compacted_view(read_all(bootstrap, topic)) == with_tombstones,
               "the first clean (latest value per key, tombstones kept)", timeout=30, interval=0.5)
    time.sleep(1.2)  # past delete.retention.ms: the next pass drops the tombstones
    produce(bootstrap, topic, fillers(f"{tag}-b"))
    model.update(fillers(f"{tag}-b"))
    rows: list[tuple[int, bytes | None, bytes | None]] = []

    def second_pass() -> bool:
        rows[:] = read_all(bootstrap, topic)
        return compacted_view(rows) == expected(model)

    wait_until(second_pass, "tombstones gone after delete.retention.ms", timeout=30, interval=0.5)
    return rows


def test_a_compacted_topic_reads_as_the_latest_value_per_key(start_broker: BrokerFactory) -> None:
    broker = start_broker(sets=FAST_CLEANER)
    topic = topic_name("compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    rnd = random.Random(18)
    model: Model = {}
    history = random_history(rnd, 40, 600, b"v")
    produce(broker.bootstrap, topic, history)
    model.update(history)
    rows = clean_twice(broker.bootstrap, topic, model, "seal")
    offsets = [o for o, _, _ in rows]
    assert offsets[-1] - offsets[0] + 1 > len(offsets)  # offsets kept, with gaps


def test_compact_delete_topic_is_both_compacted_and_held_to_its_retention(start_broker: BrokerFactory) -> None:
    """cleanup.policy=compact,delete: records older than retention.ms go with their segments
    (a compact-only topic given the same records keeps them), and what is left reads as the
    latest value per key."""
    broker = start_broker(sets={**FAST_CLEANER, "log.retention.check.interval.ms": "200"})
    both, compact_only = topic_name("compact-delete"), topic_name("compact-only")
    create_topic(broker.bootstrap, both, config={**COMPACTED, "cleanup.policy": "compact,delete",
                                                 "retention.ms": str(30 * 60_000)})
    create_topic(broker.bootstrap, compact_only, config={**COMPACTED, "retention.ms": str(30 * 60_000)})
    rnd = random.Random(7)
    old = random_history(rnd, 30, 300, b"old") + fillers("old")
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    for topic in (both, compact_only):
        produce(broker.bootstrap, topic, old, timestamp_ms=an_hour_ago)
    old_end = len(old)
    # retention: every segment of the hour-old records goes (the active one is rolled first)
    wait_until(lambda: watermarks(broker.bootstrap, both) == (old_end, old_end),
               "retention.ms to delete the old records", timeout=30, interval=0.3)
    kept = {key: value for _, key, value in read_all(broker.bootstrap, compact_only)}  # later offsets win
    assert expected(kept) == expected(dict(old))  # compact only: no retention by time
    assert watermarks(broker.bootstrap, compact_only)[0] == 0

    new = random_history(rnd, 30, 300, b"new")
    produce(broker.bootstrap, both, new)
    rows = clean_twice(broker.bootstrap, both, dict(new), "new")
    assert rows[0][0] >= old_end and len(rows) < len(new)


def _partitions(broker: BrokerProcess, topic: str) -> dict[int, dict]:
    with urllib.request.urlopen(f"{broker.admin_url}/v1/topics/{topic}/partitions", timeout=10) as resp:
        return {p["partition"]: p for p in json.load(resp)["partitions"]}


def test_topics_describe_shows_the_cleaners_progress(start_broker: BrokerFactory) -> None:
    """`strata topics describe` of compacted topics: one cleaned (dirty ratio 0, cleaned up to
    the active segment), one the cleaner holds back (min.cleanable.dirty.ratio 1: all dirty,
    never cleaned), as the admin API has them."""
    broker = start_broker(sets=FAST_CLEANER)
    cleaned, held = topic_name("described"), topic_name("held")
    create_topic(broker.bootstrap, cleaned, config=COMPACTED)
    create_topic(broker.bootstrap, held, config={**COMPACTED, "min.cleanable.dirty.ratio": "1"})
    history = random_history(random.Random(10), 20, 200, b"v") + fillers("seal")
    for topic in (cleaned, held):
        produce(broker.bootstrap, topic, history)

    def active_base(topic: str) -> int:
        return max(int(p.stem) for p in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))

    def settled() -> bool:
        state = _partitions(broker, cleaned)[0].get("cleaner") or {}
        return state.get("cleaned_up_to") == active_base(cleaned) and state.get("dirty_ratio") == 0
    wait_until(settled, "the cleaner to clean up to the active segment", timeout=30, interval=0.3)
    wait_until(lambda: _partitions(broker, held)[0].get("cleaner"), "the cleaner to look at the held topic")

    rows = {}
    for topic in (cleaned, held):
        out = ok(strata("topics", "describe", topic, "--admin-url", broker.admin_url, bootstrap=broker.bootstrap))
        rows[topic] = describe_partitions(out.stdout)[0]
    assert (rows[cleaned]["Cleaner"], rows[cleaned]["DirtyRatio"]) == ("local idle", "0.00")
    assert rows[cleaned]["CleanedUpTo"] == str(active_base(cleaned)) != "0"
    assert (rows[held]["Cleaner"], rows[held]["DirtyRatio"], rows[held]["CleanedUpTo"]) == ("local idle", "1.00", "-")
    assert _partitions(broker, held)[0]["cleaner"]["passes"] == 0
    assert _partitions(broker, cleaned)[0]["cleaner"]["passes"] >= 1


def test_a_record_without_a_key_is_refused_by_a_compacted_topic(start_broker: BrokerFactory) -> None:
    broker = start_broker()
    topic = topic_name("keyless")
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    p = producer(broker.bootstrap, **{"message.timeout.ms": 10_000})
    results: list[KafkaError | None] = []
    p.produce(topic, key=None, value=b"no key", partition=0, on_delivery=lambda e, m: results.append(e))
    p.produce(topic, key=b"k", value=b"keyed", partition=0, on_delivery=lambda e, m: results.append(e))
    p.flush(15)
    errors = [e for e in results if e is not None]
    assert errors and errors[0].code() == KafkaError.INVALID_RECORD, results
    assert read_all(broker.bootstrap, topic) in ([], [(0, b"k", b"keyed")], [(1, b"k", b"keyed")])


def test_keyless_records_get_invalid_record_with_per_record_errors_in_the_produce_answer(
    start_broker: BrokerFactory,
) -> None:
    """Over the raw protocol, Kafka's answer: INVALID_RECORD at every Produce version, and from
    v8 ``record_errors`` naming each keyless record by its index in the batch; nothing of the
    refused batch is appended."""
    broker = start_broker()
    topic = topic_name("keyless-wire")
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    low, high = api_table()[0].min_version, api_table()[0].max_version
    with WireConnection(broker.bootstrap) as conn:
        for version in range(low, high + 1):
            answer = conn.call(example_request(0, version, name=topic, index=0,
                                               records=records(4, b"v", keyless=(1, 3))))
            result = answer.responses[0].partition_responses[0]
            assert int(result.error_code) == INVALID_RECORD, (version, result)
            if version >= 8:
                assert [e.batch_index for e in result.record_errors] == [1, 3], (version, result)
                assert all("without key" in e.batch_index_error_message for e in result.record_errors)
                assert "without a key" in result.error_message
        answer = conn.call(example_request(0, high, name=topic, index=0, records=records(2, b"keyed")))
        assert (int(answer.responses[0].partition_responses[0].error_code),
                answer.responses[0].partition_responses[0].base_offset) == (0, 0)
    assert [(o, v) for o, _, v in read_all(broker.bootstrap, topic)] == [(0, b"keyed"), (1, b"keyed")]


def test_a_compacted_topic_on_the_defaults_is_created_tiered(start_broker: BrokerFactory) -> None:
    """As Kafka Streams, Connect and Schema Registry create them: only cleanup.policy set; the
    broker tiers by default (strata up), and the topic is created, compacted and tiered."""
    broker = start_broker()
    topic = topic_name("defaults")
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    client = admin(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = client.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["remote.storage.enable"].value == "true"


KILL_POINTS = ("cleaned", "swapping", "swapped")


def _paused(broker: BrokerProcess, point: str) -> Path | None:
    marker = broker.data_dir / "logs" / f"cleaner-paused-{point}"
    return marker if marker.exists() else None


def test_kill_9_in_the_middle_of_cleaning_leaves_a_whole_log(start_broker: BrokerFactory) -> None:
    """The broker killed at three points of a clean (cleaned files written, swap renamed,
    segments swapped): each restart reads a whole log, and cleaning then completes."""
    broker = start_broker(sets={**FAST_CLEANER, "log.cleaner.test.pause.at": KILL_POINTS[0]})
    topic = topic_name("kill-clean")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    rnd = random.Random(9)
    model: Model = {}
    for n, point in enumerate(KILL_POINTS):
        history = random_history(rnd, 25, 300, b"round%d" % n) + fillers(f"seal-{n}")
        produce(broker.bootstrap, topic, history)
        model.update(history)
        wait_until(lambda p=point: _paused(broker, p), f"the cleaner to pause at {point}", timeout=30)
        broker.kill()
        marker = _paused(broker, point)
        assert marker is not None
        marker.unlink()
        after = KILL_POINTS[n + 1] if n + 1 < len(KILL_POINTS) else ""
        broker.sets["log.cleaner.test.pause.at"] = after
        broker.start()
        rows = read_all(broker.bootstrap, topic)
        latest: Model = {}
        for _, key, value in rows:
            assert key is not None
            latest[key] = value
        assert latest == model, f"after a kill at {point}"
    produce(broker.bootstrap, topic, fillers("seal-last"))
    model.update(fillers("seal-last"))
    time.sleep(1.1)
    produce(broker.bootstrap, topic, fillers("seal-after"))
    model.update(fillers("seal-after"))
    wait_until(lambda: compacted_view(read_all(broker.bootstrap, topic)) == expected(model),
               "cleaning to complete after the restarts", timeout=30, interval=0.5)


def test_transactions_in_a_compacted_topic_clean_to_the_committed_latest_per_key(
    start_broker: BrokerFactory,
) -> None:
    """Committed and aborted transactions over the same keys: after cleaning, read_committed
    reads the committed latest value per key, and the aborted records are gone from the log
    itself (a read_uncommitted read no longer sees them)."""
    broker = start_broker(sets=FAST_CLEANER)
    topic = topic_name("txn-compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    p = producer(broker.bootstrap, **{"transactional.id": f"{topic}-tx", "batch.size": 1500})
    p.init_transactions(CLIENT_TIMEOUT_S)
    model: Model = {}
    rnd = random.Random(18)
    for n in range(6):
        records = random_history(rnd, 15, 40, b"tx%d" % n)
        p.begin_transaction()
        for key, value in records:
            p.produce(topic, key=key, value=value, partition=0)
        if n % 3 == 1:
            p.abort_transaction(CLIENT_TIMEOUT_S)
        else:
            p.commit_transaction(CLIENT_TIMEOUT_S)
            model.update(records)
    produce(broker.bootstrap, topic, fillers("seal"))
    model.update(fillers("seal"))

    def cleaned() -> bool:
        uncommitted = read_all(broker.bootstrap, topic, **{"isolation.level": "read_uncommitted"})
        return not any(v is not None and v.startswith((b"tx1-", b"tx4-")) for _, _, v in uncommitted)

    wait_until(cleaned, "the aborted records cleaned away", timeout=30, interval=0.5)
    latest: Model = {}
    rows = read_all(broker.bootstrap, topic)
    for _, key, value in rows:
        assert key is not None
        latest[key] = value
    # tombstones may be gone already (delete.retention.ms=1000), or not yet
    assert sorted((k, v) for k, v in latest.items() if v is not None) == expected(model)
    assert all(model[k] is None for k, v in latest.items() if v is None)
    assert len(rows) < 4 * 40  # compacted, not just filtered
