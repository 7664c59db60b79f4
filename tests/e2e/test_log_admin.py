"""DeleteRecords (local and tiered partitions), DescribeLogDirs, AlterConfigs and
OffsetForLeaderEpoch, driven by confluent-kafka's AdminClient and consumer and by
kafka-python's schema-built requests (issue 21, missing APIs)."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource
from kafka.protocol.admin import DescribeLogDirsRequest
from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest

from tests.e2e import helpers
from tests.e2e import rawkafka as rk

T = helpers.CLIENT_TIMEOUT_S
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -4, -5
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75
VALUE = b"r" * 200

TIERING = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
    "log.segment.delete.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker(module_start_broker: Any) -> Any:
    return module_start_broker(sets=TIERING)


def _delete_records(bootstrap: str, topic: str, offset: int, partition: int = 0) -> Any:
    client = helpers.admin(bootstrap)
    tp = TopicPartition(topic, partition, offset)
    return client.delete_records([tp], request_timeout=T)[tp].result(timeout=T + 5)


def _list_offset(bootstrap: str, topic: str, timestamp: int, version: int = 9) -> int:
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0,
                                                                    timestamp=timestamp)
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])])
    (answer,) = rk.call(bootstrap, request, version).topics[0].partitions
    assert answer.error_code == 0, answer
    return int(answer.offset)


def _first_offset(bootstrap: str, topic: str) -> int:
    """The offset of the first record a consumer reads from the beginning."""
    c = helpers.consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msgs = helpers.wait_until(lambda: [m for m in c.consume(num_messages=1, timeout=0.5)
                                           if m.error() is None], "a record", timeout=30)
        return int(msgs[0].offset())
    finally:
        c.close()


def _alter_configs(client: Any, resource: ConfigResource, **kwargs: Any) -> None:
    """confluent-kafka's alter_configs is the non-incremental AlterConfigs (deprecated there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = client.alter_configs([resource], request_timeout=T, **kwargs)
    futures[resource].result(T + 5)


def _produce_one_per_batch(bootstrap: str, topic: str, n: int) -> None:
    helpers.produce_values(bootstrap, topic, [VALUE] * n, **{"linger.ms": 0, "batch.num.messages": 1})


# --------------------------------------------------------------------------- DeleteRecords


def test_delete_records_moves_the_log_start_of_a_local_partition(broker: Any) -> None:
    topic = helpers.topic_name("delete-records")
    helpers.create_topic(broker.bootstrap, topic, config={"segment.bytes": "1024"})
    _produce_one_per_batch(broker.bootstrap, topic, 20)

    assert _delete_records(broker.bootstrap, topic, 7).low_watermark == 7
    assert helpers.watermarks(broker.bootstrap, topic) == (7, 20)
    got = helpers.consume(broker.bootstrap, topic, [0], 13)
    assert [m.offset() for m in got] == list(range(7, 20))
    assert _delete_records(broker.bootstrap, topic, 3).low_watermark == 7  # never backwards
    with pytest.raises(KafkaException) as beyond:
        _delete_records(broker.bootstrap, topic, 21)
    assert beyond.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    fetched = rk.fetch(broker.bootstrap, topic, 0, 3)
    assert fetched.error_code == OFFSET_OUT_OF_RANGE

    # -1: everything up to the high watermark
    assert _delete_records(broker.bootstrap, topic, -1).low_watermark == 20
    assert helpers.watermarks(broker.bootstrap, topic) == (20, 20)


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(broker: Any) -> None:
    """As Kafka: refused when cleanup.policy is compact alone; compact,delete allows it."""
    topic = helpers.topic_name("compacted")
    helpers.create_topic(broker.bootstrap, topic,
                         config={"cleanup.policy": "compact", "remote.storage.enable": "false"})
    helpers.produce_values(broker.bootstrap, topic, [b"x"] * 3, key=b"k")
    with pytest.raises(KafkaException) as refused:
        _delete_records(broker.bootstrap, topic, 2)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert helpers.watermarks(broker.bootstrap, topic) == (0, 3)
    both = helpers.topic_name("compact-delete")
    helpers.create_topic(broker.bootstrap, both,
                         config={"cleanup.policy": "compact,delete", "remote.storage.enable": "false"})
    helpers.produce_values(broker.bootstrap, both, [b"x"] * 3, key=b"k")
    assert _delete_records(broker.bootstrap, both, 2).low_watermark == 2
    assert helpers.watermarks(broker.bootstrap, both) == (2, 3)


def test_one_delete_records_for_a_whole_topic_survives_a_kill_9(start_broker: Any) -> None:
    """The AdminClient sends one request for every partition a broker leads; every start
    moves, is answered, and is on disk before the answer (one checkpoint for the request:
    one per partition took 5.9 s for 600 partitions). A partition asked past its end fails
    alone."""
    b = start_broker()
    topic = helpers.topic_name("delete-wide")
    partitions = 120
    helpers.create_topic(b.bootstrap, topic, partitions=partitions)
    producer = helpers.producer(b.bootstrap)
    for p in range(partitions):
        for _ in range(4):
            producer.produce(topic, value=b"x", partition=p)
    assert producer.flush(T) == 0
    client = helpers.admin(b.bootstrap)
    asked = [TopicPartition(topic, p, p % 4 + 1) for p in range(partitions - 1)]
    asked.append(TopicPartition(topic, partitions - 1, 9))  # past its high watermark (4)
    futures = client.delete_records(asked, request_timeout=T)
    lows = {tp.partition: futures[tp].result(timeout=T + 5).low_watermark for tp in asked[:-1]}
    assert lows == {p: p % 4 + 1 for p in range(partitions - 1)}
    with pytest.raises(KafkaException) as beyond:
        futures[asked[-1]].result(timeout=T + 5)
    assert beyond.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    b.restart(clean=False)  # kill -9: only what was checkpointed before the answers counts
    for p in (0, 1, 57, partitions - 2, partitions - 1):
        expected = (p % 4 + 1, 4) if p < partitions - 1 else (0, 4)
        assert helpers.watermarks(b.bootstrap, topic, p) == expected, p


def _manifest(data_dir: Path) -> dict[str, Any]:
    (path,) = (data_dir / "bucket").rglob("manifest.json")
    return dict(json.loads(path.read_text()))


def _tiering_settled(b: Any, topic: str) -> int:
    """Waits until every sealed segment is in the bucket and gone locally; the local start.

    The offsets the test picks then follow from the segment layout alone, never from
    how far the broker's tiering rounds had got when the test looked.
    """
    def settled() -> int | None:
        local = list((b.data_dir / "logs" / f"{topic}-0").glob("*.log"))
        start = _list_offset(b.bootstrap, topic, EARLIEST_LOCAL)
        tiered = _list_offset(b.bootstrap, topic, LATEST_TIERED)
        return start if len(local) == 1 and start > 0 and tiered == start - 1 else None

    return int(helpers.wait_until(settled, "sealed segments uploaded and deleted locally"))


def test_delete_records_on_a_tiered_partition_moves_the_remote_start_too(start_broker: Any) -> None:
    """Below the local log start the bucket's manifest must follow; it survives a restart."""
    b = start_broker(sets=TIERING)
    topic = helpers.topic_name("tiered-delete")
    helpers.create_topic(b.bootstrap, topic, config={
        "remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "0"})
    _produce_one_per_batch(b.bootstrap, topic, 40)
    # sealed segments uploaded, then removed locally: the oldest records are only remote
    local_start = _tiering_settled(b, topic)
    doc = _manifest(b.data_dir)
    assert doc["segments"][-1]["last_offset"] == local_start - 1
    assert _list_offset(b.bootstrap, topic, EARLIEST) == 0

    # DescribeLogDirs reports the local size only
    (result,) = rk.call(b.bootstrap, DescribeLogDirsRequest(topics=None), 4).results
    (entry,) = [t for t in result.topics if t.name == topic]
    local_bytes = sum(p.stat().st_size for p in (b.data_dir / "logs" / f"{topic}-0").glob("*.log"))
    assert entry.partitions[0].partition_size == local_bytes
    assert local_bytes < 40 * len(VALUE)

    # delete into the remote range
    target = doc["segments"][0]["last_offset"] + 2
    assert target < local_start
    assert _delete_records(b.bootstrap, topic, target).low_watermark == target
    assert _list_offset(b.bootstrap, topic, EARLIEST) == target
    doc = _manifest(b.data_dir)
    assert doc["log_start_offset"] == target
    assert all(s["last_offset"] >= target for s in doc["segments"])
    assert rk.fetch(b.bootstrap, topic, 0, target - 1).error_code == OFFSET_OUT_OF_RANGE
    assert _first_offset(b.bootstrap, topic) == target  # read back from the bucket

    # and past the local log start: both tiers move
    _produce_one_per_batch(b.bootstrap, topic, 5)  # offsets 40-44
    local_target = _tiering_settled(b, topic) + 1
    assert local_start < local_target < 45
    assert _delete_records(b.bootstrap, topic, local_target).low_watermark == local_target
    assert _manifest(b.data_dir)["log_start_offset"] == local_target

    b.restart()
    assert helpers.watermarks(b.bootstrap, topic) == (local_target, 45)
    assert _first_offset(b.bootstrap, topic) == local_target


# --------------------------------------------------------------------------- DescribeLogDirs


def test_describe_log_dirs_reports_the_log_dir_partitions_and_sizes(broker: Any) -> None:
    topic = helpers.topic_name("log-dirs")
    helpers.create_topic(broker.bootstrap, topic, partitions=2)
    helpers.produce_values(broker.bootstrap, topic, [b"d" * 100] * 10, partition=1)
    request = DescribeLogDirsRequest(topics=[
        DescribeLogDirsRequest.DescribableLogDirTopic(topic=topic, partitions=[0, 1])])
    for version in (1, 4):
        answer = rk.call(broker.bootstrap, request, version)
        (result,) = answer.results
        assert result.error_code == 0
        assert Path(result.log_dir) == (broker.data_dir / "logs").resolve()
        (described,) = result.topics
        sizes = {p.partition_index: p.partition_size for p in described.partitions}
        on_disk = sum(p.stat().st_size
                      for p in (broker.data_dir / "logs" / f"{topic}-1").glob("*.log"))
        assert sizes == {0: 0, 1: on_disk} and on_disk > 1000
        assert all(p.offset_lag == 0 and not p.is_future_key for p in described.partitions)
        if version >= 4:
            assert result.total_bytes >= result.usable_bytes > 0


# --------------------------------------------------------------------------- AlterConfigs


def _describe(client: Any, resource: ConfigResource) -> dict[str, Any]:
    return dict(client.describe_configs([resource], request_timeout=T)[resource].result(T + 5))


def test_alter_configs_replaces_a_topics_overrides(broker: Any) -> None:
    """The non-incremental AlterConfigs (confluent's alter_configs, KafkaJS's alterConfigs)."""
    topic = helpers.topic_name("alter")
    helpers.create_topic(broker.bootstrap, topic,
                         config={"retention.ms": "3600000", "segment.bytes": "4096"})
    client = helpers.admin(broker.bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic,
                         set_config={"max.message.bytes": "2000", "cleanup.policy": "delete"})
    _alter_configs(client, res)
    after = _describe(client, ConfigResource(ConfigResource.Type.TOPIC, topic))
    assert after["max.message.bytes"].value == "2000"
    assert after["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert after["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert after["retention.ms"].value == "604800000"  # back to the default
    assert after["segment.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # validate_only changes nothing; a bad key is INVALID_CONFIG and changes nothing
    dry = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "1000"})
    _alter_configs(client, dry, validate_only=True)
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"no.such.config": "1"})
    with pytest.raises(KafkaException) as refused:
        _alter_configs(client, bad)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    again = _describe(client, ConfigResource(ConfigResource.Type.TOPIC, topic))
    assert again["max.message.bytes"].value == "2000"
    assert again["retention.ms"].value == "604800000"

    missing = ConfigResource(ConfigResource.Type.TOPIC, helpers.topic_name("nope"),
                             set_config={"retention.ms": "1000"})
    with pytest.raises(KafkaException) as unknown:
        _alter_configs(client, missing)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_alter_configs_of_the_broker_accepts_no_static_key(broker: Any) -> None:
    client = helpers.admin(broker.bootstrap)
    empty = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={})
    _alter_configs(client, empty)
    static = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={"log.dirs": "/elsewhere"})
    with pytest.raises(KafkaException) as refused:
        _alter_configs(client, static)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "log.dirs" in refused.value.args[0].str()
    described = _describe(client, ConfigResource(ConfigResource.Type.BROKER, "1"))
    assert described["log.dirs"].value != "/elsewhere"


# --------------------------------------------------------------------------- OffsetForLeaderEpoch


def _epoch_end(bootstrap: str, topic: str, epoch: int, current: int = -1) -> Any:
    part = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=current, leader_epoch=epoch)
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[part])])
    (answer,) = rk.call(bootstrap, request, 4).topics[0].partitions
    return answer.error_code, answer.leader_epoch, answer.end_offset


def test_offset_for_leader_epoch_answers_from_the_epoch_cache(broker: Any) -> None:
    topic = helpers.topic_name("epochs")
    empty = helpers.topic_name("epochs-empty")
    helpers.create_topic(broker.bootstrap, topic)
    helpers.create_topic(broker.bootstrap, empty)
    helpers.produce_values(broker.bootstrap, topic, [b"e"] * 5)

    assert _epoch_end(broker.bootstrap, topic, 0) == (0, 0, 5)
    assert _epoch_end(broker.bootstrap, topic, 3) == (0, -1, -1)  # newer than any: undefined
    assert _epoch_end(broker.bootstrap, empty, 0) == (0, 0, 0)
    assert _epoch_end(broker.bootstrap, topic, 0, current=0) == (0, 0, 5)
    assert _epoch_end(broker.bootstrap, topic, 0, current=2)[0] == UNKNOWN_LEADER_EPOCH
    assert _epoch_end(broker.bootstrap, helpers.topic_name("nope"), 0)[0] == UNKNOWN_TOPIC_OR_PARTITION


def test_a_consumer_validates_its_position_with_offset_for_leader_epoch(broker: Any) -> None:
    """librdkafka validates a position that carries a leader epoch (KIP-320), then reads on."""
    topic = helpers.topic_name("validate")
    helpers.create_topic(broker.bootstrap, topic)
    helpers.produce_values(broker.bootstrap, topic, [b"p%d" % i for i in range(10)])
    before = _requests(broker, "OffsetForLeaderEpoch")
    c = helpers.consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 4, leader_epoch=0)])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            got += [m for m in c.consume(num_messages=10, timeout=0.5) if m.error() is None]
    finally:
        c.close()
    assert [m.value() for m in got] == [b"p%d" % i for i in range(4, 10)]
    assert _requests(broker, "OffsetForLeaderEpoch") > before


def _requests(broker: Any, api: str) -> float:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "strata_kafka_requests_total" and sample.labels.get("api") == api:
                return float(sample.value)
    return 0.0
