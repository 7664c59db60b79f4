"""One partition this broker hosts, as leader or follower: :class:`Partition`.

Kafka's ``Partition``: the local log plus what the metadata says of the
partition (replicas, ISR, leader, leader epoch, partition epoch) and, while this
broker leads it, what it knows of each follower (the offset it fetches from,
i.e. its log end offset).

* **Leader epoch checks** (:meth:`Partition.check_leader`): a request naming an
  older leader epoch than the partition's gets ``FENCED_LEADER_EPOCH``, a newer
  one ``UNKNOWN_LEADER_EPOCH``; a request that needs the leader reaching a
  follower gets ``NOT_LEADER_OR_FOLLOWER`` (Kafka's ``getLocalLog``).
* **Becoming leader** records ``(leader epoch, log end offset)`` in the
  leader-epoch cache (so OffsetForLeaderEpoch answers for the new epoch at once)
  and forgets what it knew of followers.
* **High watermark**: the lowest log end offset in the *maximal* ISR -- the
  committed ISR plus replicas this leader has asked the controller to add
  (AlterPartition in flight), as Kafka's KIP-497 leader counts them, so a record
  acknowledged with ``acks=all`` is on every replica that may become leader. With
  the ISR just this broker (replication factor 1), it is the log end offset.
* **ISR expansion** (:meth:`Partition.expansion_candidates`): a replica outside
  the ISR whose log end offset has reached the high watermark and the start of
  the current leader epoch.
* **ISR shrink** (:meth:`Partition.out_of_sync`): an ISR member that has not
  caught up with the leader's log end for ``replica.lag.time.max.ms`` (Kafka's
  ``lastCaughtUpTimeMs``: a fetch at the leader's log end catches up now; a
  fetch at least at the log end the previous fetch saw catches up as of that
  previous fetch), unless its log end already equals the leader's. While a
  shrink is pending the larger, committed ISR still counts for the high
  watermark.
* **min.insync.replicas**: an ``acks=all`` append needs that many replicas in
  the committed ISR (:meth:`Partition.check_min_isr`); an append that reached
  the high watermark while the maximal ISR is below it is answered
  ``NOT_ENOUGH_REPLICAS_AFTER_APPEND`` (:meth:`Partition.replicated`).

Not thread-safe: lives on the broker's event loop.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from common.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from controller.errors import FencedLeaderEpochError
from controller.registrations import NO_LEADER, PartitionRegistration
from local_tier.log import Log

__all__ = ["FollowerState", "Partition", "Transition"]

NO_EPOCH = -1
_log = logging.getLogger("strata.replication")


class Transition(enum.Enum):
    """What applying a registration did to this broker's role for the partition."""

    NONE = "none"
    LEADER = "leader"  # became leader, or stays leader at a new leader epoch
    FOLLOWER = "follower"  # became follower, or follows a new leader / leader epoch


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica`` state)."""

    #: when it last held the leader's log end (monotonic ms); set to "now" for ISR
    #: members when this broker becomes leader, so each gets a full lag window
    last_caught_up_ms: float
    log_end_offset: int = -1  # -1: has not fetched under this leadership yet
    log_start_offset: int = -1
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1  # the leader's log end at its previous fetch
    broker_epoch: int = -1


class Partition:
    """See the module docstring. ``local_id`` is this broker's node id."""

    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        log: Log,
        local_id: int,
        may_lead: Callable[[], bool] = lambda: True,
    ) -> None:
        self.topic = topic
        #: whether this broker may act as a leader at all right now (the broker's lifecycle:
        #: its heartbeats are answered and it reads the metadata)
        self._may_lead = may_lead
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.local_id = local_id
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.adding: tuple[int, ...] = ()
        self.removing: tuple[int, ...] = ()
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: tuple[int, ...] | None = None
        self.leader_epoch_start_offset = 0
        #: the registration last taken from the metadata: an apply skips a partition whose
        #: registration is this very object (a snapshot keeps the objects of what did not change)
        self.registration: PartitionRegistration | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"Partition({self.name}, {role}, epoch {self.leader_epoch}, isr {list(self.isr)})"

    # -- metadata ---------------------------------------------------------------------

    def update(self, reg: PartitionRegistration) -> Transition:
        """Take the registration from the metadata; what changed for this broker."""
        was_leader, old_leader, old_epoch = self.is_leader, self.leader_id, self.leader_epoch
        self.registration = reg
        if reg.partition_epoch < self.partition_epoch and reg.leader_epoch <= self.leader_epoch:
            return Transition.NONE  # older than what an AlterPartition answer already gave
        self.replicas, self.isr = reg.replicas, reg.isr
        self.adding, self.removing = reg.adding_replicas, reg.removing_replicas
        self.leader_id, self.leader_epoch = reg.leader, reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        if self.pending_isr is not None and (
            set(self.pending_isr) <= set(reg.isr) or reg.leader_epoch != old_epoch
        ):
            self.pending_isr = None
        if self.is_leader:
            if was_leader and old_epoch == reg.leader_epoch:
                self._keep_followers()
                return Transition.NONE
            self._become_leader()
            return Transition.LEADER
        self.followers.clear()
        self.pending_isr = None
        if not was_leader and old_leader == reg.leader and old_epoch == reg.leader_epoch:
            return Transition.NONE
        return Transition.FOLLOWER

    def _become_leader(self) -> None:
        log = self.log
        self.leader_epoch_start_offset = log.log_end_offset
        if self.leader_epoch > log.leader_epoch_cache.latest_epoch:
            # in memory: the first append of the epoch writes it (no disk I/O per leadership)
            log.leader_epoch_cache.assign(self.leader_epoch, log.log_end_offset, persist=False)
        now = monotonic_ms()
        self.followers = {
            r: FollowerState(now if r in self.isr else 0.0) for r in self.replicas if r != self.local_id
        }
        self.pending_isr = None
        self.maybe_increment_high_watermark()

    def _keep_followers(self) -> None:
        now = monotonic_ms()
        self.followers = {
            r: self.followers.get(r) or FollowerState(now if r in self.isr else 0.0)
            for r in self.replicas
            if r != self.local_id
        }

    def apply_isr(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int) -> bool:
        """An AlterPartition answer: the ISR the controller committed. True if the high
        watermark moved (a shrink may let it)."""
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            return False
        self.isr, self.partition_epoch = isr, partition_epoch
        self.pending_isr = None
        return self.maybe_increment_high_watermark()

    # -- requests ---------------------------------------------------------------------

    def check_leader(
        self, current_leader_epoch: int = NO_EPOCH, require_leader: bool = True, *, follower: bool = False
    ) -> Log:
        """The log, if a request naming ``current_leader_epoch`` may use it (module docstring)."""
        if current_leader_epoch != NO_EPOCH and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self.name}: the request's leader epoch {current_leader_epoch} is older "
                    f"than the current {self.leader_epoch}"
                )
            raise UnknownLeaderEpochError(
                f"{self.name}: the request's leader epoch {current_leader_epoch} is newer than "
                f"the current {self.leader_epoch}"
            )
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"this broker ({self.local_id}) is not the leader of {self.name}; "
                f"broker {self.leader_id} is"
                if self.leader_id != NO_LEADER
                else f"{self.name} has no leader right now"
            )
        # a follower still fetches from a leader that stopped: it catches up with every
        # write that leader acknowledged before anyone else can be elected
        if require_leader and not follower and not self._may_lead():
            raise NotLeaderOrFollowerError(
                f"this broker ({self.local_id}) cannot confirm it still leads {self.name}: the "
                "controller has not answered its heartbeats, or it cannot read the cluster "
                "metadata; another broker may be elected"
            )
        return self.log

    # -- the leader's view of its followers -------------------------------------------

    def maximal_isr(self) -> set[int]:
        return set(self.isr) | set(self.pending_isr or ())

    def follower(self, replica_id: int) -> FollowerState:
        """What this leader knows of a follower; ``NotLeaderOrFollowerError`` for a broker
        that is no replica."""
        state = self.followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.name} (replicas {list(self.replicas)})"
            )
        return state

    def record_follower_fetch(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, broker_epoch: int,
        now_ms: float,
    ) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end offset, validated: at most
        this leader's, on the same history); True if the high watermark moved."""
        state = self.follower(replica_id)
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_leo >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = min(fetch_offset, leo)
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_leo = leo
        state.last_fetch_ms = now_ms
        state.broker_epoch = broker_epoch
        return self.maybe_increment_high_watermark()

    def note_append(self, requests_ms: Mapping[int, float]) -> None:
        """Before the log end moved past them: a follower that held the log end at its last
        noted fetch, and has fetched since (``requests_ms``: each follower broker's latest
        request), held it then. A follower in an incremental fetch session does not name a
        partition whose position is unchanged, so this is the fetch Kafka's leader would
        have noted for it (its ``lastCaughtUpTimeMs``)."""
        for replica, state in self.followers.items():
            if state.log_end_offset >= state.last_fetch_leader_leo >= 0:
                seen = requests_ms.get(replica, 0.0)
                if seen > state.last_caught_up_ms:
                    state.last_caught_up_ms = seen

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark up to the lowest log end offset in the maximal ISR."""
        if not self.is_leader:
            return False
        log = self.log
        candidate = log.log_end_offset
        if self.pending_isr is None and len(self.isr) <= 1:  # the ISR is this broker alone
            if candidate > log.high_watermark:
                log.update_high_watermark(candidate)
                return True
            return False
        for replica in self.maximal_isr():
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            candidate = min(candidate, state.log_end_offset if state is not None else -1)
        if candidate > log.high_watermark:
            log.update_high_watermark(candidate)
            return True
        return False

    def expansion_candidates(self) -> list[int]:
        """Replicas outside the maximal ISR that caught up (module docstring)."""
        if not self.is_leader or self.pending_isr is not None:
            return []
        hw = self.log.high_watermark
        out = []
        for replica, state in self.followers.items():
            if replica in self.isr:
                continue
            if state.log_end_offset >= hw and state.log_end_offset >= self.leader_epoch_start_offset:
                out.append(replica)
        return sorted(out)

    def caught_up(self) -> bool:
        """Whether every follower in the ISR holds this leader's log end and no ISR change is
        pending: then none can fall out of sync before the log end moves or one fetches from
        behind it."""
        if not self.is_leader or self.pending_isr is not None:
            return False
        leo = self.log.log_end_offset
        for replica in self.isr:
            state = self.followers.get(replica)
            if replica != self.local_id and state is not None and state.log_end_offset != leo:
                return False
        return True

    def out_of_sync(self, now_ms: float, max_lag_ms: int) -> list[int]:
        """ISR members that have not caught up for ``max_lag_ms`` (module docstring)."""
        if not self.is_leader or self.pending_isr is not None:
            return []
        leo = self.log.log_end_offset
        out = []
        for replica in self.isr:
            state = self.followers.get(replica)
            if replica == self.local_id or state is None:
                continue
            if state.log_end_offset != leo and now_ms - state.last_caught_up_ms > max_lag_ms:
                out.append(replica)
        return out

    # -- min.insync.replicas ----------------------------------------------------------

    def check_min_isr(self) -> None:
        """Before an ``acks=all`` append: ``NotEnoughReplicasError`` when the committed ISR
        is smaller than ``min.insync.replicas``."""
        need = self.log.config.min_insync_replicas
        if len(self.isr) < need:
            raise NotEnoughReplicasError(
                f"{self.name}: the in-sync replicas {list(self.isr)} are fewer than "
                f"min.insync.replicas ({need})"
            )

    def replicated(self, offset: int) -> bool:
        """Whether the ISR holds every offset below ``offset`` (acks=all): the leader's
        high watermark reached it. ``NotEnoughReplicasAfterAppendError`` when it did but
        the maximal ISR is below ``min.insync.replicas`` (Kafka's
        ``checkEnoughReplicasReachOffset``); ``NotLeaderOrFollowerError`` when this broker
        no longer leads."""
        self.check_leader()
        if self.log.high_watermark < offset:
            return False
        need = self.log.config.min_insync_replicas
        if len(self.maximal_isr()) < need:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.name}: offset {offset - 1} is replicated, but the in-sync replicas "
                f"{sorted(self.maximal_isr())} are fewer than min.insync.replicas ({need})"
            )
        return True


def monotonic_ms() -> float:
    return time.monotonic() * 1000
