"""Replica placement: balance and rack spread as properties, determinism, manual checks."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidReplicationFactorError
from controller import InvalidReplicaAssignmentError
from controller.placement import (
    PlacementBroker,
    ReplicaPlacer,
    rack_alternated,
    validate_manual_assignment,
)


@st.composite
def layouts(draw: st.DrawFn, equal_racks: bool) -> tuple[list[PlacementBroker], int, int, int]:
    """(brokers, partitions, replication factor, seed); racks absent or equally sized."""
    racks = draw(st.sampled_from([0, 2, 3, 4]))
    per_rack = draw(st.integers(1, 4))
    count = racks * per_rack if racks else draw(st.integers(1, 12))
    brokers = [
        PlacementBroker(100 + 3 * i, f"rack-{i % racks}" if racks else None) for i in range(count)
    ]
    if not equal_racks and racks:
        brokers = brokers[: draw(st.integers(racks, count))]
    factor = draw(st.integers(1, min(len(brokers), 4)))
    return brokers, draw(st.integers(1, 60)), factor, draw(st.integers(0, 2**32))


def spread(counts: Counter[int], brokers: list[PlacementBroker]) -> int:
    values = [counts.get(b.node_id, 0) for b in brokers]
    return max(values) - min(values)


@settings(max_examples=150, deadline=None)
@given(layouts(equal_racks=True))
def test_leaders_and_replicas_are_balanced_across_brokers(
    layout: tuple[list[PlacementBroker], int, int, int],
) -> None:
    brokers, partitions, factor, seed = layout
    placed = ReplicaPlacer(seed).place(brokers, partitions, factor)
    assert len(placed) == partitions
    assert all(len(set(replicas)) == factor for replicas in placed)
    assert {r for replicas in placed for r in replicas} <= {b.node_id for b in brokers}
    assert spread(Counter(replicas[0] for replicas in placed), brokers) <= 1
    assert spread(Counter(r for replicas in placed for r in replicas), brokers) <= factor


@settings(max_examples=150, deadline=None)
@given(layouts(equal_racks=False))
def test_every_partition_spans_as_many_racks_as_it_can(
    layout: tuple[list[PlacementBroker], int, int, int],
) -> None:
    brokers, partitions, factor, seed = layout
    rack_of = {b.node_id: b.rack for b in brokers}
    racks = len(set(rack_of.values()))
    for replicas in ReplicaPlacer(seed).place(brokers, partitions, factor):
        assert len({rack_of[r] for r in replicas}) == min(factor, racks)


def test_the_same_seed_places_the_same_way_and_another_seed_starts_elsewhere() -> None:
    brokers = [PlacementBroker(n) for n in range(1, 7)]
    first = ReplicaPlacer(11).place(brokers, 12, 3)
    assert ReplicaPlacer(11).place(brokers, 12, 3) == first
    assert any(ReplicaPlacer(s).place(brokers, 12, 3) != first for s in range(12, 20))


def test_consecutive_leaders_alternate_racks() -> None:
    brokers = [PlacementBroker(n, "a" if n <= 3 else "b") for n in range(1, 7)]
    assert [b.node_id for b in rack_alternated(brokers)] == [1, 4, 2, 5, 3, 6]
    leaders = [replicas[0] for replicas in ReplicaPlacer(3).place(brokers, 6, 2)]
    racks = ["a" if leader <= 3 else "b" for leader in leaders]
    assert all(x != y for x, y in zip(racks, racks[1:], strict=False))


def test_a_replication_factor_above_the_brokers_is_refused_with_kafkas_message() -> None:
    brokers = [PlacementBroker(1), PlacementBroker(2)]
    with pytest.raises(InvalidReplicationFactorError, match="only 2 broker.s. are registered"):
        ReplicaPlacer(0).place(brokers, 1, 3)
    with pytest.raises(InvalidReplicationFactorError, match="only 2 of the 3 registered"):
        ReplicaPlacer(0).place(brokers, 1, 3, registered=3)


@pytest.mark.parametrize(
    ("replicas", "factor", "message"),
    [
        ([], None, "empty replica list"),
        ([1, 5], None, "includes broker 5, but no such broker is registered"),
        ([2, 2], None, "the broker 2 more than once"),
        ([1, 2], 3, "not consistent with previous partitions, which have 3"),
    ],
)
def test_manual_assignments_are_checked(
    replicas: list[int], factor: int | None, message: str
) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=message):
        validate_manual_assignment(replicas, frozenset({1, 2, 3}), factor)
    validate_manual_assignment([3, 1], frozenset({1, 2, 3}), 2)
