"""The partition side of transactions: COMMIT/ABORT markers, and the seams the coordinator uses.

The transaction coordinator ends a transaction by writing a marker into every
partition the transaction touched. :func:`write_txn_markers` does that on this
broker, taking the inputs of Kafka's WriteTxnMarkers (key 27) entry, so the
coordinator calls it in process today and sends WriteTxnMarkers (handled by
:mod:`service.handlers.txn_markers`, which calls the same function) once
partitions live on other brokers. Per partition it:

1. appends a control batch (Kafka's marker record: key ``version, type``, value
   ``version, coordinator_epoch``) with the producer's id and epoch, checked as
   Kafka does (an older producer epoch: ``INVALID_PRODUCER_EPOCH``; an older
   coordinator epoch: ``TRANSACTION_COORDINATOR_FENCED``);
2. completes the producer's open transaction in the partition's producer state
   (an aborted one goes into the segment's ``.txnindex``) and so moves the last
   stable offset;
3. moves the high watermark and wakes waiting fetches.

Then, for partitions of a topic with a registered :data:`TxnCompletionHook`
(``__consumer_offsets``: the group coordinator's pending transactional offset
commits), the hook is called once with those partitions whose marker was appended.

A marker is written at most once per producer epoch and transaction (issue 31):
the partition's producer state already says whether the producer has an open
transaction there. When it has none, its epoch on the partition is the
marker's, and the marker's coordinator epoch is not older, the marker is
answered NONE without an append -- it is a coordinator's retry of a marker that
already landed (the first try's answer was lost or timed out waiting for the
ISR), or a marker for a partition the producer wrote nothing to since its last
one. The answer still waits for the ISR to hold the log up to its end, so a
retry is answered NONE only once the first marker is replicated. A marker at a
newer epoch (an epoch fence), or for a producer the partition has never seen,
is written: it bumps the producer's epoch there, so a zombie's late batch at
the old epoch is refused instead of opening a transaction no marker will end.

Not thread-safe: runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from common.errors import ErrorCode, KafkaError
from common.record.control import build_marker_batch
from local_tier.log import LogAppendInfo
from local_tier.producer_state import AppendOrigin
from service.replication.barrier import note_append

__all__ = [
    "InitProducerIdResult",
    "MarkerHost",
    "MarkerLog",
    "TransactionalInit",
    "TxnCompletionHook",
    "write_txn_markers",
]

_log = logging.getLogger("strata.txn")

TxnCompletionHook = Callable[[int, int, bool, Sequence[int]], None]
"""``hook(producer_id, producer_epoch, committed, partitions)``.

Registered per topic in ``Broker.txn_completion_hooks`` (the group coordinator
registers one for ``__consumer_offsets``). Called on the event loop after the
markers of one WriteTxnMarkers entry are in the log and the high watermark has
moved, with the partitions of that topic whose marker was written. A commit
makes the producer's pending transactional offset commits on those partitions
the group's committed offsets; an abort discards them. It must not raise (an
exception is logged; the markers stay written).
"""


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error_code: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionalInit(Protocol):
    """What InitProducerId hands a request with a transactional id to (the coordinator)."""

    async def init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
    ) -> InitProducerIdResult:
        """Kafka's ``TransactionCoordinator.handleInitProducerId`` (PRODUCER_FENCED is sent
        as INVALID_PRODUCER_EPOCH to clients below v4 by the handler)."""
        ...


class _ProducerEntry(Protocol):
    producer_epoch: int
    coordinator_epoch: int
    current_txn_first_offset: int | None


class _ProducerState(Protocol):
    def last_entry(self, producer_id: int) -> _ProducerEntry | None: ...


class MarkerLog(Protocol):
    """A led partition's log, as far as the at-most-once check needs it."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def producer_state(self) -> _ProducerState: ...


class _LedPartition(Protocol):
    def check_leader(self) -> MarkerLog: ...


class _Replicas(Protocol):
    def get_partition(self, topic: str, index: int) -> _LedPartition: ...


class MarkerHost(Protocol):
    """The broker, as far as markers need it."""

    txn_completion_hooks: dict[str, TxnCompletionHook]

    @property
    def replicas(self) -> _Replicas: ...

    def append(self, topic: str, partition: int, records: bytes, origin: AppendOrigin = ...) -> LogAppendInfo: ...

    def metrics_error(self, api: str, code: ErrorCode) -> None: ...


def write_txn_markers(
    host: MarkerHost,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
    partitions: Sequence[tuple[str, int]],
) -> dict[tuple[str, int], ErrorCode]:
    """Write one COMMIT (``committed``) or ABORT marker into each of ``partitions``.

    Returns the error code per partition (``ErrorCode.none`` when written):
    ``UNKNOWN_TOPIC_OR_PARTITION``, ``INVALID_PRODUCER_EPOCH``,
    ``TRANSACTION_COORDINATOR_FENCED``, ``KAFKA_STORAGE_ERROR``... A marker the
    partition already has (no open transaction of the producer there, same epoch) is
    answered NONE without a second append (the module docstring).
    """
    batch = build_marker_batch(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        committed=committed,
    )
    results: dict[tuple[str, int], ErrorCode] = {}
    done: dict[str, list[int]] = {}
    for topic, partition in partitions:
        try:
            if _already_ended(host, topic, partition, producer_id, producer_epoch, coordinator_epoch):
                results[(topic, partition)] = ErrorCode.none
                continue
            host.append(topic, partition, batch, AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            host.metrics_error("WriteTxnMarkers", exc.code)
            results[(topic, partition)] = exc.code
            continue
        except OSError as exc:
            _log.error("marker for producer %d in %s-%d failed: %s", producer_id, topic, partition, exc)
            results[(topic, partition)] = ErrorCode.kafka_storage_error
            continue
        results[(topic, partition)] = ErrorCode.none
        done.setdefault(topic, []).append(partition)
    for topic, written in done.items():
        hook = host.txn_completion_hooks.get(topic)
        if hook is None:
            continue
        try:
            hook(producer_id, producer_epoch, committed, tuple(written))
        except Exception:  # noqa: BLE001 - a hook's bug must not undo written markers
            _log.exception("transaction completion hook of %s failed", topic)
    return results


def _already_ended(
    host: MarkerHost, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> bool:
    """True when the marker would change nothing: the producer has no open transaction on
    this partition it leads, at the marker's epoch, and no newer coordinator wrote its last
    marker. The log end is noted as this request's write, so the answer waits for the ISR
    (an earlier try's marker may not be replicated yet). Raises what an append would
    (NOT_LEADER_OR_FOLLOWER...); an older epoch is left to the append to refuse."""
    log_ = host.replicas.get_partition(topic, partition).check_leader()
    entry = log_.producer_state.last_entry(producer_id)
    if (
        entry is None
        or entry.current_txn_first_offset is not None
        or entry.producer_epoch != producer_epoch
        or entry.coordinator_epoch > coordinator_epoch
    ):
        return False
    note_append(topic, partition, log_.log_end_offset)
    return True
