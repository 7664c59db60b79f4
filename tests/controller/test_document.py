"""The cluster metadata document: format 2 round trips, format 1 read and upgraded."""

from __future__ import annotations

import json
import uuid

import pytest

from controller import (
    BrokerConfig,
    BrokerRegistration,
    ClusterMetadata,
    Controller,
    Endpoint,
    LeaderRecoveryState,
    ObjectStoreMetadataStore,
    PartitionRegistration,
    TopicInfo,
)
from controller.commit import current_document
from controller.document_codec import decode, encode
from remote_tier import ObjectStore
from tests.controller.cluster_helpers import (
    FakeClock,
    join,
    make_cluster_controller,
    tick_until_active,
)
from tests.controller.conftest import MakeStore

TOPIC_ID = uuid.UUID("3f1c1a7e-8f0e-4c0b-9a57-2f2f1d0d6b11")

V1_DOCUMENT = {
    "version": 1,
    "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ",
    "revision": 7,
    "topics": [
        {
            "name": "orders",
            "topic_id": str(TOPIC_ID),
            "partitions": 2,
            "configs": {"retention.ms": "3600000"},
            "created_ms": 1700000000000,
        },
    ],
    "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
}


def sample() -> ClusterMetadata:
    topic = TopicInfo("orders", TOPIC_ID, 2, {"retention.ms": "1"}, 17)
    moving = PartitionRegistration(
        replicas=(3, 1, 2),
        isr=(1,),
        leader=1,
        leader_epoch=4,
        partition_epoch=9,
        adding_replicas=(3,),
        removing_replicas=(2,),
        leader_recovery_state=LeaderRecoveryState.RECOVERING,
    )
    offline = PartitionRegistration(
        replicas=(2,), isr=(2,), leader=-1, leader_epoch=1, partition_epoch=1
    )
    broker = BrokerRegistration(
        1,
        uuid.uuid4(),
        5,
        (Endpoint("PLAINTEXT", "h", 9092), Endpoint("INTERNAL", "h", 9093, 1)),
        rack="r1",
        fenced=False,
    )
    md = ClusterMetadata(
        cluster_id="q1Sh-9_ISia_zwGINzRvyQ",
        revision=12,
        controller_id=1,
        controller_epoch=3,
        next_producer_id=5000,
    )
    return (
        md.with_topic(topic, (moving, offline))
        .with_broker(broker)
        .with_section("client_quotas", [{"entity": {"user": "a"}, "producer_byte_rate": 1024.0}])
    )


def test_format_2_round_trips_every_field() -> None:
    md = sample()
    assert decode(encode(md)) == md
    assert encode(decode(encode(md))) == encode(md)


def test_format_2_keeps_the_fields_format_1_readers_use() -> None:
    document = json.loads(encode(sample()))
    assert document["version"] == 2
    topic = document["topics"][0]
    assert (topic["name"], topic["topic_id"], topic["partitions"]) == ("orders", str(TOPIC_ID), 2)
    assert topic["partition_states"][1] == {
        "partition": 1,
        "replicas": [2],
        "isr": [2],
        "leader": -1,
        "leader_epoch": 1,
        "partition_epoch": 1,
    }
    assert document["controller"] == {"node_id": 1, "epoch": 3}
    assert document["producer_ids"] == {"next_producer_id": 5000}


def test_a_section_this_version_does_not_know_is_kept_as_it_is() -> None:
    document = json.loads(encode(sample()))
    document["sections"]["acls"] = [{"principal": "User:x", "operation": "READ"}]
    md = decode(json.dumps(document).encode())
    assert md.section("acls") == [{"principal": "User:x", "operation": "READ"}]
    assert json.loads(encode(md))["sections"]["acls"] == document["sections"]["acls"]


def test_format_1_is_read_as_a_single_node_cluster() -> None:
    md = decode(json.dumps(V1_DOCUMENT).encode())
    assert md.revision == 7 and md.controller_epoch == 0 and md.next_producer_id == 0
    assert md.topics["orders"].configs == {"retention.ms": "3600000"}
    assert md.partitions[TOPIC_ID] == (PartitionRegistration((1,), (1,), 1),) * 2
    broker = md.brokers[1]
    assert (broker.endpoint(), broker.fenced, broker.incarnation_id) == (
        Endpoint("PLAINTEXT", "localhost", 9092),
        True,
        None,
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"version": 3}, "format version 3 is not supported"),
        ({"version": 2, "cluster_id": "x"}, "malformed"),
        ({**json.loads(encode(sample())), "revision": "7"}, "revision is '7', not an integer"),
    ],
)
def test_a_document_it_cannot_read_is_refused_clearly(document: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        decode(json.dumps(document).encode())


def test_partition_states_out_of_order_are_refused() -> None:
    document = json.loads(encode(sample()))
    states = document["topics"][0]["partition_states"]
    states.reverse()
    with pytest.raises(ValueError, match="listed at position 0"):
        decode(json.dumps(document).encode())


def write_v1(store: ObjectStore) -> None:
    store.put("cluster/metadata.json", json.dumps(V1_DOCUMENT).encode())


def test_the_single_node_controller_upgrades_a_format_1_bucket_on_its_first_write(
    make_fs_store: MakeStore,
) -> None:
    store = make_fs_store()
    write_v1(store)
    controller = Controller(ObjectStoreMetadataStore(store), BrokerConfig())
    assert (
        controller.topic("orders") is not None
        and controller.cluster_id == V1_DOCUMENT["cluster_id"]
    )
    controller.register_broker("localhost", 9092)
    assert json.loads(store.get("cluster/metadata.json"))["version"] == 3  # now the log's head
    document = current_document(store)
    assert document is not None and document["revision"] == 8
    assert [p["leader"] for p in document["topics"][0]["partition_states"]] == [1, 1]


def test_a_new_controller_upgrades_format_1_and_partitions_follow_their_broker(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store()
    write_v1(store)
    ctl = tick_until_active(clock, [make_cluster_controller(store, clock, 1)])
    offline = ctl.partitions("orders")
    assert [(p.leader, p.isr, p.leader_epoch) for p in offline] == [(-1, (1,), 1)] * 2
    assert json.loads(store.get("cluster/metadata.json"))["version"] == 3
    join(ctl, 1)  # the broker of the single-node cluster comes back: it leads again
    assert [(p.leader, p.leader_epoch) for p in ctl.partitions("orders")] == [(1, 2)] * 2
