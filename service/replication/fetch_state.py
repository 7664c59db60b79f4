"""A fetcher's partitions and which of them fetch now: :class:`PartitionFetchState`, :class:`Roster`;
and a follower's truncation to its leader's history, :func:`truncate_to_leader`.

A follower with thousands of idle partitions must not walk them all every round (twice a
second per leader). The :class:`Roster` of a fetcher knows when its list of fetching
partitions may have changed: a partition's state or back-off was set (every change goes
through :class:`PartitionFetchState`'s setters), one was added or removed, or a back-off
ran out. Otherwise the last list holds, and only the partitions whose log changed
(``touched``, from the log manager's change listeners) can have a new fetch position.

Not thread-safe: the fetcher's task on the event loop.
"""

from __future__ import annotations

import enum

from service.replication.fetch_session import Position
from service.replication.partition import Partition

__all__ = ["PartitionFetchState", "Roster", "State", "truncate_to_leader"]

TopicPartition = tuple[str, int]


class State(enum.Enum):
    BOOTSTRAPPING = "bootstrapping"
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    PARKED = "parked"  # waiting for the metadata to name a new leader


class Roster:
    """See the module docstring."""

    __slots__ = ("rescan", "touched", "next_ready")

    def __init__(self) -> None:
        self.rescan = True  # the fetching list must be rebuilt (a state or a back-off changed)
        self.touched: set[TopicPartition] = set()  # logs changed since the last request
        self.next_ready = float("inf")  # when the earliest back-off ends

    def take_touched(self) -> set[TopicPartition]:
        touched, self.touched = self.touched, set()
        return touched


class PartitionFetchState:
    """One followed partition in a fetcher (Kafka's ``PartitionFetchState``)."""

    __slots__ = ("partition", "leader_epoch", "key", "_state", "_delayed_until", "_roster",
                 "_position", "_position_of")

    def __init__(self, partition: Partition, leader_epoch: int, state: State,
                 roster: Roster | None = None) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.key: TopicPartition = (partition.topic, partition.index)
        self._state = state
        self._delayed_until = 0.0
        self._roster = roster or Roster()
        self._roster.rescan = True
        self._position: Position | None = None
        self._position_of = (-1, -1)

    def __repr__(self) -> str:
        return f"PartitionFetchState({self.partition.name}, {self._state.value}, epoch {self.leader_epoch})"

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        if value is not self._state:
            self._state = value
            self._roster.rescan = True

    @property
    def delayed_until(self) -> float:
        return self._delayed_until

    @delayed_until.setter
    def delayed_until(self, value: float) -> None:
        self._delayed_until = value
        self._roster.rescan = True

    def position(self) -> Position:
        """What a fetch request says of this partition, recomputed only after its log
        changed (``Log.changes``) or its leader epoch did."""
        log = self.partition.log
        of = (log.changes, self.leader_epoch)
        if self._position is None or of != self._position_of:
            self._position = (log.log_end_offset, self.leader_epoch, log.leader_epoch_cache.latest_epoch,
                              log.log_start_offset)
            self._position_of = of
        return self._position


def truncate_to_leader(partition: Partition, leader_epoch: int, leader_end: int) -> bool:
    """Cut the follower's log where the leader says its history ends (the rules are in
    :mod:`service.replication.fetcher`'s docstring); True when the truncation is complete, False when another
    OffsetForLeaderEpoch round must follow."""
    log = partition.log
    if leader_epoch < 0 or leader_end < 0:
        # the leader knows no epoch up to this follower's: keep what was committed
        log.truncate_to(log.high_watermark)
        return True
    own_epoch, own_end = log.leader_epoch_cache.end_offset_for(leader_epoch)
    if own_epoch < 0:  # no epoch of its own up to the leader's: the leader's end bounds it
        log.truncate_to(min(leader_end, log.log_end_offset))
        return True
    log.truncate_to(min(leader_end, own_end))
    return own_epoch == leader_epoch
