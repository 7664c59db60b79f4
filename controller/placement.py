"""Where new partitions go: rack-aware replica placement, and manual assignments checked.

:class:`ReplicaPlacer` follows the idea of Kafka's rack-aware assignment: the
brokers are put in a *rack-alternated* order (first broker of each rack, then
the second of each rack, ...); partition ``i``'s leader is the broker at
position ``start + i`` of that order, so leaders go round-robin over the brokers
and alternate racks; its other replicas are taken walking on from the leader
with a shift that grows every ``len(brokers)`` partitions (so the same brokers
do not always follow each other), always preferring a broker in the rack that
holds the fewest replicas of the partition so far. Hence:

* every partition's replicas span ``min(replication_factor, racks)`` racks;
* leaders differ by at most one partition between brokers;
* without racks, or with racks of equal size, replicas per broker differ by at
  most ``replication_factor`` (without racks, every full round of
  ``len(brokers)`` partitions puts exactly ``replication_factor`` replicas on
  every broker). ``tests/controller/test_placement.py`` checks these as
  properties.

``start`` and the initial shift come from the placer's random generator, so a
placer seeded the same way places the same way (tests), while successive
topics start on different brokers.

Only the brokers passed in are used: the controller passes the live, unfenced
ones. Not thread-safe (the random generator): the controller calls it under its
commit lock.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.errors import InvalidReplicationFactorError
from controller.errors import InvalidReplicaAssignmentError

__all__ = ["PlacementBroker", "ReplicaPlacer", "rack_alternated", "validate_manual_assignment"]


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    """A broker replicas may be placed on, and its rack (None: no rack)."""

    node_id: int
    rack: str | None = None


def rack_alternated(brokers: Sequence[PlacementBroker]) -> list[PlacementBroker]:
    """Brokers ordered rack by rack in turn: racks by name (no rack first), ids ascending."""
    by_rack: dict[str, list[PlacementBroker]] = {}
    for broker in sorted(brokers, key=lambda b: b.node_id):
        by_rack.setdefault(broker.rack or "", []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    ordered: list[PlacementBroker] = []
    for depth in range(max((len(c) for c in columns), default=0)):
        ordered.extend(column[depth] for column in columns if depth < len(column))
    return ordered


class ReplicaPlacer:
    """Places the replicas of new partitions (see the module docstring)."""

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def place(
        self,
        brokers: Sequence[PlacementBroker],
        partitions: int,
        replication_factor: int,
        *,
        registered: int | None = None,
    ) -> list[tuple[int, ...]]:
        """Replica lists (leader first) for ``partitions`` new partitions.

        ``registered`` is how many brokers are registered at all (fenced ones
        included), for the error message. ``InvalidReplicationFactorError`` when
        there are fewer usable brokers than ``replication_factor``.
        """
        if replication_factor <= 0:
            raise InvalidReplicationFactorError(
                "Replication factor must be larger than 0, or -1 to use the default value."
            )
        total = len(brokers) if registered is None else registered
        if replication_factor > total:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                f"{total} broker(s) are registered."
            )
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): only "
                f"{len(brokers)} of the {total} registered broker(s) are unfenced."
            )
        ordered = rack_alternated(brokers)
        n = len(ordered)
        start = self._random.randrange(n)
        shift = self._random.randrange(n)
        racks = {b.node_id: b.rack or "" for b in ordered}
        placed: list[tuple[int, ...]] = []
        for i in range(partitions):
            if i > 0 and i % n == 0:
                shift += 1
            first = (start + i) % n
            walk = [ordered[_follower_index(first, shift, k, n)].node_id for k in range(n - 1)]
            placed.append(_pick(ordered[first].node_id, walk, replication_factor, racks))
        return placed


def _follower_index(first: int, shift: int, k: int, n: int) -> int:
    """The k-th broker after ``first`` (k = 0 .. n-2), every other broker exactly once."""
    return (first + 1 + (shift + k) % (n - 1)) % n


def _pick(
    leader: int, walk: Sequence[int], replication_factor: int, racks: Mapping[int, str]
) -> tuple[int, ...]:
    """The leader, then from ``walk`` the brokers in the least used racks, in walk order."""
    chosen = [leader]
    per_rack = {racks[leader]: 1}
    remaining = list(walk)
    while len(chosen) < replication_factor:
        best = min(remaining, key=lambda b: per_rack.get(racks[b], 0))
        remaining.remove(best)
        chosen.append(best)
        per_rack[racks[best]] = per_rack.get(racks[best], 0) + 1
    return tuple(chosen)


def validate_manual_assignment(
    replicas: Sequence[int],
    registered: Sequence[int] | set[int] | frozenset[int],
    replication_factor: int | None = None,
) -> None:
    """Kafka's checks of a manual assignment: not empty, registered brokers only, none
    twice, and (when given) ``replication_factor`` replicas. ``InvalidReplicaAssignmentError``."""
    if not replicas:
        raise InvalidReplicaAssignmentError(
            "The manual partition assignment includes an empty replica list."
        )
    known = set(registered)
    seen: set[int] = set()
    for broker in sorted(replicas):
        if broker not in known:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered."
            )
        if broker in seen:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker} more than once."
            )
        seen.add(broker)
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignmentError(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            f"replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s)."
        )
