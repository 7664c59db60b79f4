"""Topic and config administration through real clients: DescribeConfigs,
IncrementalAlterConfigs, CreatePartitions, DescribeCluster, validate_only,
ListOffsets by timestamp, auto-creation, acks, and metadata surviving restarts."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from tests.e2e.helpers import (
    CLIENT_TIMEOUT_S,
    admin,
    consume,
    consumer,
    create_topic,
    produce_values,
    producer,
    topic_name,
    topic_names,
    watermarks,
)


def _describe_topic_configs(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    client = admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    return dict(client.describe_configs([res])[res].result(timeout=CLIENT_TIMEOUT_S))


def _alter(bootstrap: str, topic: str, entries: list[ConfigEntry], validate_only: bool = False) -> None:
    client = admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    client.incremental_alter_configs([res], validate_only=validate_only)[res].result(
        timeout=CLIENT_TIMEOUT_S
    )


def _kafka_error(exc_info: pytest.ExceptionInfo[KafkaException]) -> KafkaError:
    return exc_info.value.args[0]


def test_describe_configs_shows_kafka_defaults_and_overrides(module_broker) -> None:  # type: ignore[no-untyped-def]
    topic = topic_name("cfg")
    create_topic(module_broker.bootstrap, topic, config={"retention.ms": "123456"})
    configs = _describe_topic_configs(module_broker.bootstrap, topic)
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["max.message.bytes"].value == "1048588"
    assert not configs["segment.bytes"].is_default or configs["segment.bytes"].source != 1


def test_incremental_alter_set_and_delete_round_trip(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("alter")
    create_topic(b, topic)
    _alter(b, topic, [ConfigEntry("retention.bytes", "1000000", incremental_operation=AlterConfigOpType.SET)])
    assert _describe_topic_configs(b, topic)["retention.bytes"].value == "1000000"
    _alter(b, topic, [ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert _describe_topic_configs(b, topic)["retention.bytes"].value == "-1"
    # validate_only changes nothing
    _alter(b, topic, [ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.SET)],
           validate_only=True)
    assert _describe_topic_configs(b, topic)["retention.ms"].value == "604800000"


def test_incremental_alter_with_invalid_value_is_invalid_config(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("badalter")
    create_topic(b, topic)
    with pytest.raises(KafkaException) as exc:
        _alter(b, topic, [ConfigEntry("segment.bytes", "lots", incremental_operation=AlterConfigOpType.SET)])
    assert _kafka_error(exc).code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as exc:
        _alter(b, topic, [ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])
    assert _kafka_error(exc).code() == KafkaError.INVALID_CONFIG


def test_alter_config_of_unknown_topic_is_unknown_topic(module_broker) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaException) as exc:
        _alter(module_broker.bootstrap, "never-created",
               [ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    assert _kafka_error(exc).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_grows_and_refuses_to_shrink(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("grow")
    create_topic(b, topic, partitions=2)
    client = admin(b)
    client.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=CLIENT_TIMEOUT_S)
    md = client.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3, 4]
    produce_values(b, topic, [b"in-new-partition"], partition=4)
    assert [m.value() for m in consume(b, topic, [4], 1)] == [b"in-new-partition"]
    with pytest.raises(KafkaException) as exc:
        client.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert _kafka_error(exc).code() == KafkaError.INVALID_PARTITIONS


def test_validate_only_create_creates_nothing(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("dryrun")
    client = admin(b)
    futures = client.create_topics([NewTopic(topic, 3, 1)], validate_only=True)
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert topic not in topic_names(b)
    with pytest.raises(KafkaException) as exc:
        client.create_topics([NewTopic(topic, 1, 3)], validate_only=True)[topic].result(
            timeout=CLIENT_TIMEOUT_S
        )
    assert _kafka_error(exc).code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_describe_cluster_names_this_broker(module_broker) -> None:  # type: ignore[no-untyped-def]
    client = admin(module_broker.bootstrap)
    desc = client.describe_cluster().result(timeout=CLIENT_TIMEOUT_S)
    assert desc.cluster_id and len(desc.cluster_id) == 22
    assert [(n.host, n.port) for n in desc.nodes] == [("127.0.0.1", module_broker.port)]
    assert desc.controller.id == desc.nodes[0].id


def test_delete_topic_then_produce_is_unknown(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("gone")
    create_topic(b, topic)
    produce_values(b, topic, [b"x"])
    client = admin(b)
    client.delete_topics([topic])[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert topic not in topic_names(b)
    data_dirs = list((module_broker.data_dir / "logs").glob(f"{topic}-*"))
    assert all(d.name.endswith("-delete") for d in data_dirs)


def test_list_offsets_by_timestamp_uses_record_timestamps(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("bytime")
    create_topic(b, topic)
    p = producer(b)
    base = 1_700_000_000_000
    for i in range(1000):
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=base + i * 1000)
        if i % 100 == 99:
            p.flush(10)  # several batches, so the time index has entries
    assert p.flush(30) == 0
    c = consumer(b)
    try:
        asked = [TopicPartition(topic, 0, base + 500_500), TopicPartition(topic, 0, base),
                 TopicPartition(topic, 0, base + 10_000_000)]
        found = [c.offsets_for_times([tp], timeout=CLIENT_TIMEOUT_S)[0].offset for tp in asked]
    finally:
        c.close()
    assert found[0] == 501  # first record at or after the timestamp
    assert found[1] == 0
    assert found[2] == -1  # later than everything: the end (-1, as Kafka answers)


def test_log_append_time_topic_stamps_broker_time(module_broker) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name("appendtime")
    create_topic(b, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = producer(b)
    for value in (b"a", b"b"):
        p.produce(topic, value=value, partition=0, timestamp=1_000)
    assert p.flush(15) == 0
    after = int(time.time() * 1000)
    for msg in consume(b, topic, [0], 2):
        ts_type, ts = msg.timestamp()
        assert ts_type == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_setting_stores_records(module_broker, acks: str) -> None:  # type: ignore[no-untyped-def]
    b = module_broker.bootstrap
    topic = topic_name(f"acks{acks}")
    create_topic(b, topic)
    p = producer(b, acks=acks)
    for i in range(50):
        p.produce(topic, value=b"r%d" % i, partition=0)
    assert p.flush(15) == 0
    deadline = time.monotonic() + 10
    while watermarks(b, topic)[1] < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m.value() for m in consume(b, topic, [0], 50)] == [b"r%d" % i for i in range(50)]


def test_metadata_request_auto_creates_topic_with_broker_defaults(start_broker) -> None:  # type: ignore[no-untyped-def]
    b = start_broker(sets={"num.partitions": "4"})
    p = producer(b.bootstrap)
    p.produce("auto-created", value=b"hello")
    assert p.flush(15) == 0
    md = admin(b.bootstrap).list_topics("auto-created", timeout=CLIENT_TIMEOUT_S)
    assert len(md.topics["auto-created"].partitions) == 4
    # the broker says so (a client re-creating a topic just deleted was slow to find without it)
    assert "auto-created topic 'auto-created' for a Metadata request" in b.log_path.read_text()


def test_topics_and_configs_survive_restart(start_broker) -> None:  # type: ignore[no-untyped-def]
    b = start_broker()
    topic = topic_name("persist")
    create_topic(b.bootstrap, topic, partitions=3, config={"retention.ms": "7777777"})
    produce_values(b.bootstrap, topic, [b"one", b"two"], partition=2)
    client = admin(b.bootstrap)
    before = client.describe_cluster().result(timeout=CLIENT_TIMEOUT_S).cluster_id
    b.restart()
    client = admin(b.bootstrap)
    md = client.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert len(md.topics[topic].partitions) == 3
    assert _describe_topic_configs(b.bootstrap, topic)["retention.ms"].value == "7777777"
    assert client.describe_cluster().result(timeout=CLIENT_TIMEOUT_S).cluster_id == before
    assert [m.value() for m in consume(b.bootstrap, topic, [2], 2)] == [b"one", b"two"]
