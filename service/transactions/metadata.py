"""One transactional id's state, and the transitions Kafka allows between states.

States and their legal predecessors (Kafka's ``TransactionState``, transaction
version 1: the client never gets an epoch bump from EndTxn)::

    Empty              ← Empty, CompleteCommit, CompleteAbort        (InitProducerId)
    Ongoing            ← Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions/AddOffsets)
    PrepareCommit      ← Ongoing                                      (EndTxn commit)
    PrepareAbort       ← Ongoing, PrepareEpochFence                   (EndTxn abort, timeout, fence)
    CompleteCommit     ← PrepareCommit                                (markers written)
    CompleteAbort      ← PrepareAbort                                 (markers written)
    Dead               ← Empty, CompleteCommit, CompleteAbort        (transactional id expired)
    PrepareEpochFence  ← Ongoing                                      (in memory only)

A change is made in two steps, as in Kafka: ``prepare_*`` checks the move and
returns a :class:`TxnTransit` (the whole next state) while marking the id
``pending``; the coordinator writes the transit to ``__transaction_state`` and
then calls :meth:`TransactionMetadata.complete` (or :meth:`abandon` if the
write failed). While a transition is pending every other request on the id is
answered ``CONCURRENT_TRANSACTIONS``.

Invariants: ``partitions`` is empty in Empty, CompleteCommit, CompleteAbort;
``start_ms`` is -1 in Empty; ``producer_epoch`` never decreases for one
``producer_id``. Not thread-safe: lives on the broker's event loop thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from service.transactions.records import TxnLogValue

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TopicPartition",
    "TransactionMetadata",
    "TxnState",
    "TxnTransit",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka never hands out epoch 32767 so that the coordinator can always fence once more.
_MAX_EPOCH = 0x7FFF

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Each state's id (the byte in ``__transaction_state``) and name (DescribeTransactions)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.state_name == name:
                return state
        return None


S = TxnState
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
#: States in which a transaction is in progress (its partitions may hold open batches).
PENDING_STATES = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The whole state a transactional id moves to; what one ``__transaction_state`` record holds."""

    producer_id: int
    prev_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int

    def to_log_value(self) -> TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            by_topic.setdefault(topic, []).append(partition)
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state_id=self.state.id,
            partitions=tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items())),
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
        )


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    prev_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    #: the state a written-but-unconfirmed transition leads to
    pending: TxnState | None = None
    #: an epoch fence whose abort could not be written: do not bump the epoch again
    failed_epoch_fence: bool = False

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        state = TxnState.from_id(value.state_id)
        partitions = set()
        if state is not TxnState.EMPTY:
            partitions = {(t, p) for t, ids in value.partitions for p in ids}
        return cls(
            transactional_id, value.producer_id, value.producer_epoch,
            prev_producer_id=value.previous_producer_id, timeout_ms=value.timeout_ms,
            state=state, partitions=partitions, start_ms=value.start_ms,
            last_update_ms=value.last_update_ms,
        )

    # ------------------------------------------------------------------ queries

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= _MAX_EPOCH - 1

    @property
    def pending_transition(self) -> bool:
        return self.pending is not None

    # ------------------------------------------------------------------ prepares

    def _transit(self, state: TxnState, **changes: object) -> TxnTransit:
        if self.pending is not None:
            raise RuntimeError(f"{self.transactional_id}: transition to {state} while {self.pending} is pending")
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"{self.transactional_id}: {self.state} cannot move to {state}")
        values: dict[str, Any] = {
            "producer_id": self.producer_id, "prev_producer_id": self.prev_producer_id,
            "producer_epoch": self.producer_epoch, "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms, "partitions": self.partitions, "start_ms": self.start_ms,
            "last_update_ms": self.last_update_ms,
        }
        values.update(changes)
        values["partitions"] = frozenset(values["partitions"])
        self.pending = state
        return TxnTransit(state=state, **values)

    def prepare_fence_abort(self, now_ms: int) -> TxnTransit:
        """Ongoing → PrepareAbort at the next epoch: the producer that holds the id is fenced.

        Kafka's PrepareEpochFence step, done at once because nothing can run
        between the two halves on the event loop. The bumped epoch is taken in
        memory before the write; if the write fails the coordinator sets
        :attr:`failed_epoch_fence` so that the next try does not bump again.
        """
        if not self.failed_epoch_fence:
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        return self._transit(S.PREPARE_ABORT, last_update_ms=now_ms)

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | None:
        """→ Empty with the next epoch (InitProducerId); None when ``expected_epoch`` is fenced.

        With ``expected_epoch`` (KIP-360, InitProducerId v3+) a retry of the bump
        that already happened keeps the current epoch.
        """
        bumped = self.producer_epoch + 1
        last = NO_PRODUCER_EPOCH
        if expected_epoch is not None:
            if self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
                last = self.producer_epoch
            elif expected_epoch == self.last_producer_epoch:
                bumped, last = self.producer_epoch, self.last_producer_epoch
            else:
                return None
        return self._transit(
            S.EMPTY, producer_epoch=bumped, last_producer_epoch=last, timeout_ms=timeout_ms,
            partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )

    def prepare_rotate_producer_id(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """→ Empty with a fresh producer id at epoch 0 (the epochs of the old one ran out)."""
        return self._transit(
            S.EMPTY, producer_id=new_producer_id, prev_producer_id=self.producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransit:
        starting = self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        return self._transit(
            S.ONGOING, partitions=frozenset(self.partitions | added),
            start_ms=now_ms if starting else self.start_ms, last_update_ms=now_ms,
        )

    def prepare_end(self, commit: bool, now_ms: int) -> TxnTransit:
        return self._transit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.failed_epoch_fence = False
        return self._transit(state, partitions=frozenset(), last_update_ms=now_ms)

    def prepare_dead(self) -> TxnTransit:
        return self._transit(S.DEAD, partitions=frozenset())

    # ------------------------------------------------------------------ completes

    def complete(self, transit: TxnTransit) -> None:
        """Take ``transit`` as the current state (it is in ``__transaction_state`` now)."""
        if self.pending is not transit.state:
            raise RuntimeError(f"{self.transactional_id}: completing {transit.state}, pending {self.pending}")
        self.producer_id = transit.producer_id
        self.prev_producer_id = transit.prev_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.last_update_ms = transit.last_update_ms
        self.pending = None

    def abandon(self) -> None:
        """The transit could not be written: the state stays as it was."""
        self.pending = None
