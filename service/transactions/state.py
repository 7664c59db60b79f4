"""The coordinator's state, per ``__transaction_state`` partition, and every write to that log.

:class:`TxnStateStore` keeps one :class:`TxnPartition` per loaded partition
(Kafka's ``transactionMetadataCache`` entry: a coordinator epoch and the
metadata of every transactional id that hashes there). :meth:`load` rebuilds a
partition from its log (or :meth:`begin_loading` and :meth:`finish_loading` around a
:func:`rebuild` on a worker thread, which a broker taking a partition over uses),
:meth:`unload` forgets it (issue #16: a coordinator
moves with the partition's leadership; a request for an id whose partition is
not loaded here is answered ``NOT_COORDINATOR``).

Invariant: a transit takes effect in memory only once the partition's in-sync
replicas hold it (:meth:`write` appends, waits for the ISR, and only then
completes the metadata's pending transition), as Kafka's
``TransactionStateManager.appendTransactionToLog``: until then every other
request on the id is answered CONCURRENT_TRANSACTIONS, and a write that fails
or does not replicate in time abandons the transition, so the id stays in the
state its producer last saw confirmed (issue 31: a commit answered
COORDINATOR_NOT_AVAILABLE must not have moved the id to PrepareCommit behind
the producer's back, nor may a Prepare* that a failover can lose have sent
markers). Not thread-safe: lives on the broker's event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from common.errors import ErrorCode, KafkaError, RecordBatchTooLargeError, RecordTooLargeError
from service.transactions.metadata import TransactionMetadata, TxnTransit
from service.transactions.records import (
    TxnRecordFormatError,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
    txn_partition_for,
)
from service.transactions.seams import TxnStateLog

__all__ = ["TxnPartition", "TxnStateStore", "append_error", "rebuild"]

log = logging.getLogger("strata.transactions")


@dataclass(slots=True)
class TxnPartition:
    partition: int
    coordinator_epoch: int
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)


def rebuild(partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> dict[str, TransactionMetadata]:
    """The transactions a partition's records leave (the last record of an id wins). Pure:
    runs on a worker thread when a broker takes a partition over, off the event loop."""
    transactions: dict[str, TransactionMetadata] = {}
    count = 0
    for raw_key, raw_value in records:
        count += 1
        try:
            tid = decode_txn_key(raw_key)
            if raw_value is None:
                transactions.pop(tid, None)
            else:
                transactions[tid] = TransactionMetadata.from_log_value(tid, decode_txn_value(raw_value))
        except (TxnRecordFormatError, ValueError) as exc:
            log.warning("skipping an unreadable __transaction_state-%d record: %s", partition, exc)
    if count:
        log.info("loaded %d transactional id(s) from %d record(s) of __transaction_state-%d",
                 len(transactions), count, partition)
    return transactions


def append_error(exc: KafkaError) -> ErrorCode:
    """Kafka's mapping of a failed ``__transaction_state`` append to what a client sees."""
    if isinstance(exc, (RecordTooLargeError, RecordBatchTooLargeError)):
        return ErrorCode.unknown_server_error
    if exc.code == ErrorCode.kafka_storage_error:
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available


class TxnStateStore:
    def __init__(self, log_: TxnStateLog, may_lead: Callable[[], bool] = lambda: True) -> None:
        self._log = log_
        #: whether the broker can still confirm its leaderships: a paused or cut-off one may
        #: have been replaced, and answers NOT_COORDINATOR rather than from memory
        self._may_lead = may_lead
        self._partition_count: int | None = None
        self.partitions: dict[int, TxnPartition] = {}
        #: partitions being read, each with the token of the load that may install it
        self._loading: dict[int, object] = {}

    # ------------------------------------------------------------------ topology

    def ensure_topic(self) -> int:
        """Create ``__transaction_state`` when missing (once); load its new partitions."""
        if self._partition_count is None:
            self._partition_count = self._log.ensure()
            for p in self._log.hosted_partitions():
                if p not in self.partitions:
                    self.load(p, 0)
        return self._partition_count

    def existing_partitions(self) -> list[int]:
        """The hosted partitions when the topic exists (it is not created here)."""
        hosted = sorted(self._log.hosted_partitions())
        if hosted and self._partition_count is None:
            self._partition_count = self._log.ensure()
        return hosted

    def partition_for(self, transactional_id: str) -> int:
        return txn_partition_for(transactional_id, self.ensure_topic())

    def load(self, partition: int, coordinator_epoch: int) -> TxnPartition:
        """Rebuild ``partition``'s transactions from its log (the last record of an id wins)."""
        return self.install(partition, coordinator_epoch, rebuild(partition, self._log.replay(partition)))

    def begin_loading(self, partition: int) -> object:
        """``partition`` is this coordinator's but not read yet: its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until :meth:`finish_loading` with the token returned."""
        self.partitions.pop(partition, None)
        token = self._loading[partition] = object()
        return token

    def still_loading(self, partition: int, token: object) -> bool:
        """Whether the load that got ``token`` is still the wanted one (no unload, no newer load)."""
        return self._loading.get(partition) is token

    def finish_loading(self, partition: int, token: object, coordinator_epoch: int,
                       transactions: dict[str, TransactionMetadata]) -> TxnPartition | None:
        """Install what a load read (None, installing nothing, when it was superseded)."""
        if not self.still_loading(partition, token):
            return None
        del self._loading[partition]
        return self.install(partition, coordinator_epoch, transactions)

    def install(self, partition: int, coordinator_epoch: int,
                transactions: dict[str, TransactionMetadata]) -> TxnPartition:
        self._loading.pop(partition, None)
        entry = TxnPartition(partition, coordinator_epoch, transactions)
        self.partitions[partition] = entry
        return entry

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """The partition's records, to read on any thread (the log's state is taken now)."""
        return self._log.replay(partition)

    def unload(self, partition: int) -> None:
        self.partitions.pop(partition, None)
        self._loading.pop(partition, None)

    # ------------------------------------------------------------------ reads

    def lookup(self, transactional_id: str) -> tuple[ErrorCode, TxnPartition | None]:
        """The loaded partition that owns the id, or NOT_COORDINATOR."""
        try:
            partition = self.partition_for(transactional_id)
        except KafkaError:
            return ErrorCode.coordinator_not_available, None
        entry = self.partitions.get(partition)
        if entry is None:
            if partition in self._loading:
                return ErrorCode.coordinator_load_in_progress, None
            return ErrorCode.not_coordinator, None
        if not self._may_lead():
            return ErrorCode.not_coordinator, None
        return ErrorCode.none, entry

    def may_lead(self) -> bool:
        """Whether this broker can still confirm it coordinates what it holds."""
        return self._may_lead()

    def all(self) -> Iterator[tuple[TxnPartition, TransactionMetadata]]:
        for entry in list(self.partitions.values()):
            for meta in list(entry.transactions.values()):
                yield entry, meta

    # ------------------------------------------------------------------ writes

    async def write(self, meta: TransactionMetadata, transit: TxnTransit) -> ErrorCode:
        """Append ``transit``, wait for the ISR, then make it ``meta``'s state; on failure
        leave ``meta`` as it was (NOT_COORDINATOR when the partition was unloaded meanwhile)."""
        partition = txn_partition_for(meta.transactional_id, self.ensure_topic())
        entry = self.partitions.get(partition)
        error = await self._append(
            partition, meta, encode_txn_value(transit.to_log_value()), transit.state.state_name
        )
        if error == ErrorCode.none and not self._owns(entry, meta):
            error = ErrorCode.not_coordinator
        if error != ErrorCode.none:
            if meta.pending is transit.state:
                meta.abandon()
            return error
        meta.complete(transit)
        return ErrorCode.none

    async def remove(self, entry: TxnPartition, meta: TransactionMetadata) -> bool:
        """Tombstone an expired id (its Dead transit pending), then forget it."""
        error = await self._append(entry.partition, meta, None, "its tombstone")
        if error != ErrorCode.none or not self._owns(entry, meta):
            meta.abandon()
            return False
        entry.transactions.pop(meta.transactional_id, None)
        return True

    async def _append(self, partition: int, meta: TransactionMetadata, value: bytes | None, what: str) -> ErrorCode:
        try:
            end = self._log.append(partition, encode_txn_key(meta.transactional_id), value)
        except KafkaError as exc:
            log.warning("%s: writing %s failed: %s", meta.transactional_id, what, exc)
            return append_error(exc)
        error = await self._log.wait_replicated(partition, end)
        if error != ErrorCode.none:
            log.warning("%s: %s did not reach the in-sync replicas (%s)", meta.transactional_id, what, error.name)
        return error

    def _owns(self, entry: TxnPartition | None, meta: TransactionMetadata) -> bool:
        """``entry`` is still loaded and ``meta`` still its metadata of the id."""
        return (
            entry is not None
            and self.partitions.get(entry.partition) is entry
            and entry.transactions.get(meta.transactional_id) is meta
        )
