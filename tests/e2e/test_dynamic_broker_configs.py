"""Dynamic broker configs of Kafka's ``DynamicLogConfig`` (issue 32, item 8): ``log.segment.bytes``,
``log.retention.ms``, ``message.max.bytes`` ... changed at run time with IncrementalAlterConfigs
on a broker resource (``kafka-configs.sh --entity-type brokers --entity-name N`` and
``--entity-default``, the cluster default named ""), followed by every topic without an override
of its own, shown by DescribeConfigs with their sources, kept across restarts and applied by
every broker of a cluster (docs/adr/0022-dynamic-broker-configs.md).

confluent-kafka's AdminClient names a broker by id; librdkafka refuses the empty name of the
cluster default, so that one goes through kafka-python's protocol classes (what
``strata configs --entity-default`` sends)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

from . import helpers, rawkafka

RECORD = b"r" * 200  # ~270 bytes on disk as a one-record batch
BIG = b"b" * 5000
SET, DELETE = 0, 1
INVALID_REQUEST = 42
_BROKER = 4  # DescribeConfigs' resource type of a broker


def alter(bootstrap: str, broker: str, **configs: str | None) -> None:
    """IncrementalAlterConfigs of broker ``broker`` through confluent-kafka's AdminClient
    (SET a value, DELETE for None); raises KafkaException when refused."""
    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=(
        AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE)) for name, value in configs.items()]
    client = helpers.admin(bootstrap)
    resource = ConfigResource(ResourceType.BROKER, broker, incremental_configs=entries)
    client.incremental_alter_configs([resource])[resource].result(30)


def alter_default(bootstrap: str, **configs: str | None) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of the cluster default (resource name ""): (error code, message)."""
    config = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    ops = [config(name=name.replace("_", "."), config_operation=SET if value is not None else DELETE, value=value)
           for name, value in configs.items()]
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=_BROKER, resource_name="", configs=ops)], validate_only=False)
    (result,) = rawkafka.call(bootstrap, request, 1).responses
    return result.error_code, result.error_message


def described(bootstrap: str, broker: str) -> dict[str, Any]:
    """DescribeConfigs of broker ``broker`` (confluent-kafka, asked of that broker)."""
    client = helpers.admin(bootstrap)
    resource = ConfigResource(ResourceType.BROKER, broker)
    return dict(client.describe_configs([resource])[resource].result(30))


def described_raw(bootstrap: str, resource: str) -> dict[str, Any]:
    """DescribeConfigs with synonyms of broker ``resource`` ("": the cluster default), asked of
    ``bootstrap`` (confluent-kafka keeps one synonym per name, and names no cluster default)."""
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=_BROKER, resource_name=resource, configuration_keys=None)],
        include_synonyms=True)
    (result,) = rawkafka.call(bootstrap, request, 1).results
    assert result.error_code == 0, result
    return {e.name: e for e in result.configs}


def synonyms(bootstrap: str, broker: str, name: str) -> list[tuple[str, str, int]]:
    return [(s.name, s.value, s.source) for s in described_raw(bootstrap, broker)[name].synonyms]


def described_default(bootstrap: str) -> dict[str, str]:
    entries = described_raw(bootstrap, "")
    assert {e.config_source for e in entries.values()} <= {ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value}
    return {e.name: e.value for e in entries.values()}


def topic_config(bootstrap: str, topic: str, name: str) -> tuple[str, int]:
    client = helpers.admin(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = client.describe_configs([resource])[resource].result(30)[name]
    return entry.value, entry.source


def created_with(bootstrap: str, topic: str, name: str) -> tuple[str, int]:
    """CreateTopics v7's answer: the new topic's ``name`` config, with its source."""
    request = CreateTopicsRequest(timeout_ms=30_000, validate_only=False, topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])])
    (created,) = rawkafka.call(bootstrap, request, 7).topics
    assert created.error_code == 0, created
    (entry,) = [c for c in created.configs if c.name == name]
    return entry.value, entry.config_source


def produce_one(bootstrap: str, topic: str, value: bytes, partition: int = 0) -> int:
    """The error code of producing ``value`` (0: stored)."""
    p = helpers.producer(bootstrap, **{"linger.ms": 0, "retries": 0, "message.timeout.ms": 10_000})
    errors: list[Any] = []
    p.produce(topic, value=value, partition=partition, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(20) == 0
    return 0 if errors[0] is None else errors[0].code()


def segments(data_dir: Path, topic: str, partition: int = 0) -> list[Path]:
    return sorted(p for p in data_dir.rglob("*.log") if p.parent.name == f"{topic}-{partition}")


def produce_records(bootstrap: str, topic: str, n: int) -> None:
    offsets = helpers.produce_values(bootstrap, topic, (RECORD + b"%d" % i for i in range(n)),
                                     **{"linger.ms": 0, "batch.num.messages": 1})
    assert len(offsets) == n


def refusal(bootstrap: str, broker: str, **configs: str) -> tuple[int, str]:
    with pytest.raises(KafkaException) as refused:
        alter(bootstrap, broker, **configs)
    error = refused.value.args[0]
    return error.code(), error.str()


def test_log_configs_change_at_run_time_and_survive_a_restart(start_broker: Any) -> None:
    """A topic without its own segment.bytes, max.message.bytes, retention.ms follows the broker's
    dynamic value at once; one with its own keeps it; DescribeConfigs shows where each comes from."""
    broker = start_broker(sets={"log.retention.check.interval.ms": "300", "log.remote.storage.enable": "false"})
    follows, own = helpers.topic_name("follows"), helpers.topic_name("own")
    helpers.create_topic(broker.bootstrap, follows)
    helpers.create_topic(broker.bootstrap, own, config={"retention.ms": "-1", "max.message.bytes": "100000",
                                                              "segment.bytes": "8192"})
    entry = described(broker.bootstrap, "1")["log.segment.bytes"]
    assert (entry.source, entry.is_read_only) == (ConfigSource.DEFAULT_CONFIG.value, False)
    assert described(broker.bootstrap, "1")["listeners"].is_read_only

    # this broker's own value: segments roll at 4 KiB from now on
    alter(broker.bootstrap, "1", log_segment_bytes="4096")
    entry = described(broker.bootstrap, "1")["log.segment.bytes"]
    assert (entry.value, entry.source) == ("4096", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert synonyms(broker.bootstrap, "1", "log.segment.bytes") == [
        ("log.segment.bytes", "4096", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG.value)]
    assert topic_config(broker.bootstrap, follows, "segment.bytes") == ("4096", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    produce_records(broker.bootstrap, follows, 60)  # ~16 KiB
    assert len(segments(broker.data_dir, follows)) >= 4
    produce_records(broker.bootstrap, own, 60)

    # the cluster default: the largest batch, for every topic without max.message.bytes
    assert alter_default(broker.bootstrap, message_max_bytes="2000") == (0, None)
    assert described_default(broker.bootstrap) == {"message.max.bytes": "2000"}
    entry = described(broker.bootstrap, "1")["message.max.bytes"]
    assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert produce_one(broker.bootstrap, follows, BIG) == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_one(broker.bootstrap, own, BIG) == 0  # its own max.message.bytes
    assert created_with(broker.bootstrap, helpers.topic_name("new"), "max.message.bytes") == (
        "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # retention at run time: the topic without retention.ms loses its sealed segments
    assert alter_default(broker.bootstrap, log_retention_ms="500") == (0, None)
    assert topic_config(broker.bootstrap, follows, "retention.ms") == (
        "500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    helpers.wait_until(lambda: helpers.watermarks(broker.bootstrap, follows)[0] > 0,
                       "retention by the dynamic log.retention.ms", timeout=30)
    time.sleep(1)  # three more retention rounds
    assert helpers.watermarks(broker.bootstrap, own)[0] == 0  # retention.ms=-1 of its own
    assert alter_default(broker.bootstrap, log_retention_ms=None) == (0, None)

    broker.restart()  # kept in the cluster metadata
    assert described(broker.bootstrap, "1")["log.segment.bytes"].value == "4096"
    assert described_default(broker.bootstrap) == {"message.max.bytes": "2000"}
    assert produce_one(broker.bootstrap, follows, BIG) == KafkaError.MSG_SIZE_TOO_LARGE
    before = len(segments(broker.data_dir, follows))
    produce_records(broker.bootstrap, follows, 30)
    assert len(segments(broker.data_dir, follows)) >= before + 1

    # deleting the dynamic values gives the static ones back
    alter(broker.bootstrap, "1", log_segment_bytes=None)
    assert alter_default(broker.bootstrap, message_max_bytes=None) == (0, None)
    assert produce_one(broker.bootstrap, follows, BIG) == 0
    entry = described(broker.bootstrap, "1")["message.max.bytes"]
    assert (entry.value, entry.source) == ("1048588", ConfigSource.DEFAULT_CONFIG.value)


def test_read_only_configs_and_bad_values_are_refused_naming_the_key(start_broker: Any) -> None:
    broker = start_broker()
    code, message = refusal(broker.bootstrap, "1", listeners="PLAINTEXT://:1")
    assert code == INVALID_REQUEST and "Cannot update these configs dynamically: ['listeners']" in message
    code, message = refusal(broker.bootstrap, "1", log_retention_hours="1")  # static in Kafka too
    assert code == INVALID_REQUEST and "log.retention.hours" in message
    code, message = refusal(broker.bootstrap, "1", log_segment_bytes="small")
    assert code == INVALID_REQUEST and "Invalid value small for configuration log.segment.bytes" in message
    code, message = refusal(broker.bootstrap, "1", log_segment_bytes="10")
    assert code == INVALID_REQUEST and "log.segment.bytes" in message and "at least 1024" in message
    assert alter_default(broker.bootstrap, log_retention_ms="60000", log_local_retention_ms="120000") == (
        INVALID_REQUEST, "Invalid value 120000 for configuration log.local.retention.ms: Value must not be more "
        "than log.retention.ms property value: 60000")
    assert described_default(broker.bootstrap) == {}  # nothing of a refused change was kept


def test_every_broker_of_a_cluster_applies_the_default_and_its_own_value(start_cluster: Any) -> None:
    """The cluster default reaches every broker; broker 2's own value beats it there only; a
    restarted broker reads both back from the cluster metadata."""
    cluster = start_cluster(3)
    topic = helpers.topic_name("cluster")
    client = helpers.admin(cluster.bootstrap)
    futures = client.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=[[1, 2, 3], [2, 3, 1],
                                                                                        [3, 1, 2]])])
    futures[topic].result(30)
    helpers.wait_for_topic(cluster.bootstrap, topic, 3)

    def leaders() -> dict[int, int]:
        md = client.list_topics(topic, timeout=10).topics[topic]
        return {p.id: p.leader for p in md.partitions.values()}

    helpers.wait_until(lambda: leaders() == {0: 1, 1: 2, 2: 3}, "preferred leaders")
    assert alter_default(cluster.brokers[3].bootstrap, message_max_bytes="2000") == (0, None)
    for node in (1, 2, 3):  # each broker describes its own configs
        helpers.wait_until(lambda node=node: described(cluster.brokers[node].bootstrap, str(node))[
            "message.max.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, f"broker {node}")
    helpers.wait_until(lambda: [produce_one(cluster.bootstrap, topic, BIG, p) for p in range(3)]
                       == [KafkaError.MSG_SIZE_TOO_LARGE] * 3, "every leader refuses the big batch")

    alter(cluster.bootstrap, "2", message_max_bytes="100000")
    assert [(v, s) for _, v, s in synonyms(cluster.brokers[2].bootstrap, "2", "message.max.bytes")] == [
        ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value), ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("1048588", ConfigSource.DEFAULT_CONFIG.value)]
    helpers.wait_until(lambda: produce_one(cluster.bootstrap, topic, BIG, 1) == 0, "broker 2 takes its own value")
    assert [produce_one(cluster.bootstrap, topic, BIG, p) for p in (0, 2)] == [KafkaError.MSG_SIZE_TOO_LARGE] * 2

    cluster.kill(2)
    cluster.restart(2)
    assert described(cluster.brokers[2].bootstrap, "2")["message.max.bytes"].value == "100000"
    on_two, on_three = helpers.topic_name("on-2"), helpers.topic_name("on-3")
    futures = client.create_topics([NewTopic(on_two, num_partitions=1, replica_assignment=[[2]]),
                                     NewTopic(on_three, num_partitions=1, replica_assignment=[[3]])])
    for future in futures.values():
        future.result(30)
    helpers.wait_for_topic(cluster.bootstrap, on_two, 1)
    helpers.wait_for_topic(cluster.bootstrap, on_three, 1)
    assert produce_one(cluster.bootstrap, on_two, BIG) == 0
    assert produce_one(cluster.bootstrap, on_three, BIG) == KafkaError.MSG_SIZE_TOO_LARGE


COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
             "remote.storage.enable": "false"}


def offsets_read(bootstrap: str, topic: str) -> int:
    """How many records a consumer reads from the log start to the end."""
    _, high = helpers.watermarks(bootstrap, topic)
    c = helpers.consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, -2)])
        seen, deadline = 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            seen += 1
            if msg.offset() == high - 1:
                return seen
        raise AssertionError(f"{topic}: the end ({high}) not reached in 30 s")
    finally:
        c.close()


def test_the_log_cleaner_follows_its_dynamic_configs(start_broker: Any) -> None:
    """log.cleaner.backoff.ms at run time: a cleaner started to sleep ten minutes between rounds
    compacts again and again within seconds once the cluster default says 100 ms."""
    broker = start_broker(sets={"log.cleaner.backoff.ms": "600000"})
    topic = helpers.topic_name("compacted")
    helpers.create_topic(broker.bootstrap, topic, config=COMPACTED)

    def produce_duplicates(rounds: int) -> None:
        for _ in range(rounds):
            helpers.produce_values(broker.bootstrap, topic, (b"v" * 100 for _ in range(10)), key=b"same",
                                   **{"linger.ms": 0, "batch.num.messages": 1})

    produce_duplicates(10)  # 100 records of one key in ~5 sealed segments
    time.sleep(1)
    assert offsets_read(broker.bootstrap, topic) == 100  # the cleaner sleeps
    assert alter_default(broker.bootstrap, log_cleaner_backoff_ms="100", log_cleaner_threads="2") == (0, None)
    helpers.wait_until(lambda: offsets_read(broker.bootstrap, topic) < 50, "compaction after the change", timeout=30)
    produce_duplicates(10)
    helpers.wait_until(lambda: offsets_read(broker.bootstrap, topic) < 50, "compaction 100 ms later", timeout=30)
    code, message = alter_default(broker.bootstrap, log_cleaner_threads="5")  # Kafka: at most doubled at once
    assert code == INVALID_REQUEST and "log.cleaner.threads" in (message or "")
