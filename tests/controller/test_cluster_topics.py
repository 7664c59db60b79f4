"""Topic creation in a cluster: manual assignments checked, new partitions placed with the
topic's replication factor; producer ids on the single-node controller."""

from __future__ import annotations

import pytest

from common.errors import InvalidReplicationFactorError, InvalidRequestError
from controller import ClusterController, Controller, InvalidReplicaAssignmentError
from tests.controller.cluster_helpers import (
    register,
)


@pytest.fixture
def ctl(ctl3: ClusterController) -> ClusterController:
    return ctl3


def test_a_manual_assignment_places_each_partition_as_asked(ctl: ClusterController) -> None:
    topic = ctl.create_topic("t", assignments={0: [3, 1], 1: [2, 3]})
    assert topic.partitions == 2
    assert [(p.replicas, p.leader, p.isr) for p in ctl.partitions("t")] == [
        ((3, 1), 3, (3, 1)),
        ((2, 3), 2, (2, 3)),
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_partitions": 2, "assignments": {0: [1]}}, InvalidRequestError, "was not set to -1"),
        ({"assignments": {0: [1], 2: [2]}}, InvalidReplicaAssignmentError, "consecutive 0-based"),
        ({"assignments": {0: [1], 1: [1, 2]}}, InvalidReplicaAssignmentError, "which have 1"),
        ({"assignments": {0: [4]}}, InvalidReplicaAssignmentError, "are fenced or in controlled"),
        ({"replication_factor": 4}, InvalidReplicationFactorError, "only 3 of the 4 registered"),
    ],
)
def test_bad_placements_are_refused_with_kafkas_errors(
    ctl: ClusterController,
    kwargs: dict,
    error: type[Exception],
    message: str,  # type: ignore[type-arg]
) -> None:
    register(ctl, 4)  # registered but fenced
    with pytest.raises(error, match=message):
        ctl.create_topic("t", **kwargs)
    assert ctl.topic("t") is None


def test_new_partitions_keep_the_topics_replication_factor(ctl: ClusterController) -> None:
    ctl.create_topic("t", 2, 2)
    grown = ctl.create_partitions("t", 5)
    assert grown.partitions == 5
    assert all(len(p.replicas) == 2 for p in ctl.partitions("t"))
    ctl.create_partitions("t", 6, assignments=[[3, 2]])
    assert ctl.partitions("t")[5].replicas == (3, 2)
    with pytest.raises(InvalidReplicaAssignmentError, match="only 1 assignment"):
        ctl.create_partitions("t", 8, assignments=[[1, 2]])


def test_the_single_node_controller_allocates_producer_ids_durably(
    make_controller: type[Controller],
) -> None:
    first = make_controller()
    blocks = [first.allocate_producer_ids() for _ in range(2)]
    later = make_controller().allocate_producer_ids()  # a restart: never the same ids again
    assert [b.first_producer_id for b in (*blocks, later)] == [0, 1000, 2000]
    assert blocks[0].assigned_broker_id == first.node_id
