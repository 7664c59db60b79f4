"""What the replica manager is told and whom it tells: a follower's fetch of one partition
as the leader checks it, and the parts the broker plugs in (leadership listeners, the
replica fetchers, the ISR change channel to the controller)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from service.replication.partition import Partition

__all__ = ["FollowerFetch", "Followers", "IsrChanges", "LeadershipListener"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """One partition of a follower's Fetch, as the leader checks it."""

    topic: str
    partition: int
    replica_id: int
    fetch_offset: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # Fetch v12+; -1: not sent
    log_start_offset: int = -1
    broker_epoch: int = -1
    #: the incarnation the follower fetches (Fetch v13+); None: named by name only
    topic_id: uuid.UUID | None = None


class LeadershipListener(Protocol):
    """Hears this broker start and stop leading partitions (on the event loop)."""

    def on_leader(self, partition: Partition) -> None: ...

    def on_resign(self, topic: str, index: int, deleted: bool) -> None: ...


class Followers(Protocol):
    """The replica fetchers, as the replica manager drives them."""

    def add(self, partition: Partition) -> None: ...

    def remove(self, keys: Iterable[TopicPartition]) -> None: ...


class IsrChanges(Protocol):
    """Where proposed ISR changes go (AlterPartition to the controller)."""

    def submit(self, partition: Partition, new_isr: tuple[int, ...]) -> None: ...
