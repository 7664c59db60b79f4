"""Metadata as clients other than the suite's use it: topic ids, internal topics,
authorized operations; and DescribeGroups v6 (issue 21, defects 10, 11 and 14)."""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection
from confluent_kafka.admin import AclOperation, ConfigResource
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.metadata import MetadataRequest

from tests.e2e import helpers, rawconsumer
from tests.e2e import rawkafka as rk

T = helpers.CLIENT_TIMEOUT_S
Topic = MetadataRequest.MetadataRequestTopic
UNKNOWN_TOPIC_OR_PARTITION = 3
GROUP_ID_NOT_FOUND = 69
UNKNOWN_TOPIC_ID = 100

#: Kafka with no authorizer: every operation of the resource type
TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
             AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
               AclOperation.DESCRIBE}
GROUP_OPS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
             AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}


@pytest.fixture(scope="module")
def broker(module_start_broker: Any) -> Any:
    return module_start_broker(sets={"offsets.topic.num.partitions": "3"})


def _topic_id(bootstrap: str, name: str) -> uuid.UUID:
    found = rk.call(bootstrap, MetadataRequest(topics=[Topic(name=name)]), 12).topics[0]
    assert found.error_code == 0, found
    return found.topic_id


def test_metadata_by_topic_id_with_an_empty_name_answers_that_topic(broker: Any) -> None:
    """The Java client asks by id with name "" (or null): Kafka looks up the id."""
    topic = helpers.topic_name("by-id")
    helpers.create_topic(broker.bootstrap, topic, partitions=2)
    topic_id = _topic_id(broker.bootstrap, topic)
    for name in ("", None):
        answer = rk.call(broker.bootstrap, MetadataRequest(
            topics=[Topic(topic_id=topic_id, name=name)], allow_auto_topic_creation=False), 12)
        (found,) = answer.topics
        assert (found.error_code, found.name, found.topic_id) == (0, topic, topic_id)
        assert sorted(p.partition_index for p in found.partitions) == [0, 1]

    unknown = uuid.uuid4()
    (missing,) = rk.call(broker.bootstrap, MetadataRequest(
        topics=[Topic(topic_id=unknown, name="")], allow_auto_topic_creation=True), 12).topics
    assert (missing.error_code, missing.name, missing.topic_id) == (UNKNOWN_TOPIC_ID, None, unknown)
    assert "" not in helpers.topic_names(broker.bootstrap)  # nothing was created by name


def test_naming_consumer_offsets_does_not_create_it_its_coordinator_does(
    start_broker: Any, kcat: str
) -> None:
    """kcat -L -t __consumer_offsets (and Burrow) on a fresh broker must not create the
    internal topic as an ordinary one; the group coordinator creates it with its configs."""
    b = start_broker(sets={"offsets.topic.num.partitions": "3"})  # topics tiered by default
    listing = subprocess.run([kcat, "-b", b.bootstrap, "-L", "-t", "__consumer_offsets", "-m", "5"],
                             check=False, capture_output=True, text=True, timeout=30)
    assert "__consumer_offsets" in listing.stdout + listing.stderr
    (answer,) = rk.call(b.bootstrap, MetadataRequest(
        topics=[Topic(name="__consumer_offsets")], allow_auto_topic_creation=True), 12).topics
    assert (answer.error_code, answer.is_internal) == (UNKNOWN_TOPIC_OR_PARTITION, True)
    assert "__consumer_offsets" not in helpers.topic_names(b.bootstrap)

    # the first group request makes the coordinator create it, with its own configs
    client = helpers.admin(b.bootstrap)
    futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g-first")],
                                                 request_timeout=T)
    futures["g-first"].result(timeout=T + 5)
    md = client.list_topics(timeout=T)
    assert len(md.topics["__consumer_offsets"].partitions) == 3
    res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    configs = client.describe_configs([res], request_timeout=T)[res].result(timeout=T + 5)
    assert configs["remote.storage.enable"].value == "false"
    assert configs["retention.ms"].value == "-1"


def test_authorized_operations_are_every_operation_when_asked(broker: Any) -> None:
    topic = helpers.topic_name("ops")
    helpers.create_topic(broker.bootstrap, topic)
    group = helpers.topic_name("ops-group")
    helpers.produce_values(broker.bootstrap, topic, [b"x"])
    c = helpers.consumer(broker.bootstrap, **{"group.id": group})
    try:
        c.subscribe([topic])
        helpers.wait_until(lambda: c.consume(num_messages=1, timeout=0.5), "the group's record")
        client = helpers.admin(broker.bootstrap)

        described = client.describe_topics(TopicCollection([topic]),
                                           include_authorized_operations=True)[topic].result(T)
        assert set(described.authorized_operations) == TOPIC_OPS
        cluster = client.describe_cluster(include_authorized_operations=True).result(T)
        assert set(cluster.authorized_operations) == CLUSTER_OPS
        (g,) = client.describe_consumer_groups([group], include_authorized_operations=True).values()
        assert set(g.result(T).authorized_operations) == GROUP_OPS

        # not asked: not answered
        plain = client.describe_topics(TopicCollection([topic]))[topic].result(T)
        assert not plain.authorized_operations
    finally:
        c.close()

    # Metadata v10 still carries the cluster's operations (moved to DescribeCluster in v11)
    answer = rk.call(broker.bootstrap, MetadataRequest(
        topics=[Topic(name=topic)], include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True), 10)
    assert answer.authorized_operations == {int(op.value) for op in CLUSTER_OPS}
    assert answer.topics[0].authorized_operations == {int(op.value) for op in TOPIC_OPS}


def test_a_consumer_protocol_group_is_described_with_its_authorized_operations(broker: Any) -> None:
    """ConsumerGroupDescribe answers the authorized operations when asked, as DescribeGroups
    does for a classic group (the Java AdminClient's describeConsumerGroups uses it)."""
    topic = helpers.topic_name("ops848")
    helpers.create_topic(broker.bootstrap, topic)
    group = helpers.topic_name("ops848-group")
    helpers.produce_values(broker.bootstrap, topic, [b"x"])
    c = helpers.consumer(broker.bootstrap, **{"group.id": group, "group.protocol": "consumer"})
    try:
        c.subscribe([topic])
        helpers.wait_until(lambda: c.consume(num_messages=1, timeout=0.5), "the group's record")
        with rk.Connection.to(broker.bootstrap) as conn:
            asked = rawconsumer.authorized_operations(conn, group, True)
            plain = rawconsumer.authorized_operations(conn, group, False)
        assert _bits(asked) == {int(op.value) for op in GROUP_OPS}
        assert plain == -2147483648  # not asked: not answered
    finally:
        c.close()


def _bits(field: int) -> set[int]:
    return {bit for bit in range(32) if field & (1 << bit)}


def test_describe_groups_v6_answers_group_id_not_found_for_an_unknown_group(broker: Any) -> None:
    name = helpers.topic_name("no-such-group")
    (v6,) = rk.call(broker.bootstrap, DescribeGroupsRequest(groups=[name]), 6).groups
    assert (v6.error_code, v6.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
    assert name in (v6.error_message or "")
    (v5,) = rk.call(broker.bootstrap, DescribeGroupsRequest(groups=[name]), 5).groups
    assert (v5.error_code, v5.group_state) == (0, "Dead")
