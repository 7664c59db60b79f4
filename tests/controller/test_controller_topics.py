"""Topic lifecycle on the Controller: create, delete, partitions, persistence, errors."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from controller import Controller, NotControllerError, TopicDeletionDisabledError

MakeController = Callable[..., Controller]


def test_cluster_id_is_22_url_safe_base64_chars(controller: Controller) -> None:
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", controller.cluster_id)
    assert not controller.cluster_id.startswith("-")
    assert controller.controller_id == controller.node_id == 1


def test_metadata_survives_a_new_controller_on_the_same_store(
    make_controller: MakeController,
) -> None:
    first = make_controller()
    created = first.create_topic("orders", 3, configs={"retention.ms": "3600000"})
    first.create_topic("gone", 1)
    first.delete_topic("gone")
    first.create_partitions("orders", 5)
    first.register_broker("localhost", 9092, rack="r1")

    second = make_controller()
    assert second.cluster_id == first.cluster_id
    restored = second.topic("orders")
    assert restored is not None
    assert restored.topic_id == created.topic_id
    assert restored.partitions == 5
    assert dict(restored.configs) == {"retention.ms": "3600000"}
    assert restored.created_ms == created.created_ms
    assert second.topic("gone") is None
    assert second.topic_by_id(created.topic_id) == restored
    assert [(b.node_id, b.host, b.port, b.rack) for b in second.brokers()] == [
        (1, "localhost", 9092, "r1")
    ]


def test_create_topic_uses_broker_defaults_for_minus_one(make_controller: MakeController) -> None:
    controller = make_controller({"num.partitions": "4"})
    topic = controller.create_topic("t")
    assert topic.partitions == 4
    assert dict(topic.configs) == {}
    assert controller.topics() == [topic]


def test_topic_ids_are_unique_and_new_after_recreation(controller: Controller) -> None:
    first = controller.create_topic("t", 1)
    other = controller.create_topic("u", 1)
    controller.delete_topic("t")
    again = controller.create_topic("t", 1)
    assert len({first.topic_id, other.topic_id, again.topic_id}) == 3
    assert controller.topic_by_id(first.topic_id) is None


def test_register_broker_replaces_this_nodes_endpoint(make_controller: MakeController) -> None:
    controller = make_controller()
    controller.register_broker("old-host", 9092)
    controller.register_broker("new-host", 9093)
    assert [(b.host, b.port) for b in make_controller().brokers()] == [("new-host", 9093)]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is illegal, it can't be empty"),
        (".", 'Topic name cannot be "." or ".."'),
        ("..", 'Topic name cannot be "." or ".."'),
        ("x" * 250, "it can't be longer than 249 characters"),
        ("bad name", "contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
        ("bad/name", "contains a character other than ASCII alphanumerics"),
    ],
)
def test_illegal_topic_names_raise_invalid_topic(
    controller: Controller, name: str, message: str
) -> None:
    with pytest.raises(InvalidTopicError, match=re.escape(message)) as info:
        controller.create_topic(name, 1)
    assert info.value.code == ErrorCode.invalid_topic_exception


def test_legal_topic_names_include_internal_and_maximum_length(controller: Controller) -> None:
    for name in ["__consumer_offsets", "a.b-c_D9", "x" * 249]:
        assert controller.create_topic(name, 1).name == name


def test_topic_names_colliding_on_dot_and_underscore_are_rejected(controller: Controller) -> None:
    controller.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides with existing topic: a.b"):
        controller.create_topic("a_b", 1)


def test_creating_an_existing_topic_raises_topic_already_exists(controller: Controller) -> None:
    controller.create_topic("t", 1)
    with pytest.raises(
        TopicAlreadyExistsError, match=re.escape("Topic 't' already exists.")
    ) as info:
        controller.create_topic("t", 1)
    assert info.value.code == ErrorCode.topic_already_exists


@pytest.mark.parametrize("partitions", [0, -2])
def test_bad_partition_count_raises_invalid_partitions(
    controller: Controller, partitions: int
) -> None:
    with pytest.raises(
        InvalidPartitionsError, match=re.escape("Number of partitions must be larger than 0.")
    ) as info:
        controller.create_topic("t", partitions)
    assert info.value.code == ErrorCode.invalid_partitions


def test_replication_factor_above_one_raises_invalid_replication_factor(
    controller: Controller,
) -> None:
    message = (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 1 broker(s) are registered."
    )
    with pytest.raises(InvalidReplicationFactorError, match=re.escape(message)) as info:
        controller.create_topic("t", 1, replication_factor=3)
    assert info.value.code == ErrorCode.invalid_replication_factor
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        controller.create_topic("t", 1, replication_factor=0)
    assert controller.create_topic("t", 1, replication_factor=1).partitions == 1


def test_default_replication_factor_applies_to_minus_one(make_controller: MakeController) -> None:
    controller = make_controller({"default.replication.factor": "2"})
    with pytest.raises(InvalidReplicationFactorError, match="replication factor of 2"):
        controller.create_topic("t", 1)


def test_deleting_an_unknown_topic_raises_unknown_topic(controller: Controller) -> None:
    with pytest.raises(UnknownTopicOrPartitionError, match="Topic 'nope' does not exist.") as info:
        controller.delete_topic("nope")
    assert info.value.code == ErrorCode.unknown_topic_or_partition


def test_delete_topic_returns_it_and_removes_it(controller: Controller) -> None:
    created = controller.create_topic("t", 2)
    assert controller.delete_topic("t") == created
    assert controller.topics() == []


def test_delete_is_refused_when_delete_topic_enable_is_false(
    make_controller: MakeController,
) -> None:
    controller = make_controller({"delete.topic.enable": "false"})
    controller.create_topic("t", 1)
    with pytest.raises(TopicDeletionDisabledError) as info:
        controller.delete_topic("t")
    assert info.value.code == ErrorCode.topic_deletion_disabled
    assert controller.topic("t") is not None


def test_create_partitions_grows_and_never_shrinks(controller: Controller) -> None:
    controller.create_topic("t", 3)
    assert controller.create_partitions("t", 5).partitions == 5
    with pytest.raises(
        InvalidPartitionsError,
        match=re.escape("Topic currently has 5 partitions, which is higher than the requested 2."),
    ):
        controller.create_partitions("t", 2)
    with pytest.raises(InvalidPartitionsError, match=re.escape("Topic already has 5 partitions.")):
        controller.create_partitions("t", 5)
    with pytest.raises(UnknownTopicOrPartitionError):
        controller.create_partitions("nope", 5)


def test_validate_only_changes_nothing(make_controller: MakeController) -> None:
    controller = make_controller()
    controller.create_topic("t", 1)
    would_be = controller.create_topic(
        "new", 2, configs={"segment.bytes": "2048"}, validate_only=True
    )
    assert (would_be.name, would_be.partitions, dict(would_be.configs)) == (
        "new",
        2,
        {"segment.bytes": "2048"},
    )
    assert controller.create_partitions("t", 4, validate_only=True).partitions == 4
    altered = controller.incremental_alter_configs(
        "t", [("retention.ms", 0, "1")], validate_only=True
    )
    assert dict(altered.configs) == {"retention.ms": "1"}
    with pytest.raises(TopicAlreadyExistsError):
        controller.create_topic("t", 1, validate_only=True)

    for view in (controller, make_controller()):
        assert [t.name for t in view.topics()] == ["t"]
        topic = view.topic("t")
        assert topic is not None and topic.partitions == 1 and dict(topic.configs) == {}


def test_not_controller_error_is_retriable() -> None:
    assert NotControllerError("x").retriable


def test_one_operation_adds_at_most_kafkas_bound_of_partitions(controller: Controller) -> None:
    """Kafka's controller refuses an operation of more than 10,000 records with POLICY_VIOLATION;
    a request for two billion partitions is refused before anything is placed."""
    for count in (10_001, 2**31 - 1):
        with pytest.raises(PolicyViolationError, match="excessively large batch operation"):
            controller.create_topic("huge", count)
        assert controller.topic("huge") is None
    controller.create_topic("grown", 1)
    with pytest.raises(PolicyViolationError) as refused:
        controller.create_partitions("grown", 10_002)
    assert refused.value.code == ErrorCode.policy_violation
    assert controller.topic("grown").partitions == 1
    assert controller.create_partitions("grown", 10_001).partitions == 10_001  # 10,000 added: allowed
