"""The coordinator's state, per ``__transaction_state`` partition, and every write to that log.

:class:`TxnStateStore` keeps one :class:`TxnPartition` per loaded partition
(Kafka's ``transactionMetadataCache`` entry: a coordinator epoch and the
metadata of every transactional id that hashes there). :meth:`load` rebuilds a
partition from its log, :meth:`unload` forgets it (issue #16: a coordinator
moves with the partition's leadership; a request for an id whose partition is
not loaded here is answered ``NOT_COORDINATOR``).

Invariant: a transit reaches the log before it takes effect in memory
(:meth:`write` completes the metadata's pending transition only after the
append returned); a failed append abandons it. Not thread-safe: lives on the
broker's event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
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

__all__ = ["TxnPartition", "TxnStateStore", "append_error"]

log = logging.getLogger("strata.transactions")


@dataclass(slots=True)
class TxnPartition:
    partition: int
    coordinator_epoch: int
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)


def append_error(exc: KafkaError) -> ErrorCode:
    """Kafka's mapping of a failed ``__transaction_state`` append to what a client sees."""
    if isinstance(exc, (RecordTooLargeError, RecordBatchTooLargeError)):
        return ErrorCode.unknown_server_error
    if exc.code == ErrorCode.kafka_storage_error:
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available


class TxnStateStore:
    def __init__(self, log_: TxnStateLog) -> None:
        self._log = log_
        self._partition_count: int | None = None
        self.partitions: dict[int, TxnPartition] = {}

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
        entry = TxnPartition(partition, coordinator_epoch)
        count = 0
        for raw_key, raw_value in self._log.replay(partition):
            count += 1
            try:
                tid = decode_txn_key(raw_key)
                if raw_value is None:
                    entry.transactions.pop(tid, None)
                else:
                    value = decode_txn_value(raw_value)
                    entry.transactions[tid] = TransactionMetadata.from_log_value(tid, value)
            except (TxnRecordFormatError, ValueError) as exc:
                log.warning("skipping an unreadable __transaction_state-%d record: %s", partition, exc)
        self.partitions[partition] = entry
        if count:
            log.info(
                "loaded %d transactional id(s) from %d record(s) of __transaction_state-%d",
                len(entry.transactions), count, partition,
            )
        return entry

    def unload(self, partition: int) -> None:
        self.partitions.pop(partition, None)

    # ------------------------------------------------------------------ reads

    def lookup(self, transactional_id: str) -> tuple[ErrorCode, TxnPartition | None]:
        """The loaded partition that owns the id, or NOT_COORDINATOR."""
        try:
            partition = self.partition_for(transactional_id)
        except KafkaError:
            return ErrorCode.coordinator_not_available, None
        entry = self.partitions.get(partition)
        if entry is None:
            return ErrorCode.not_coordinator, None
        return ErrorCode.none, entry

    def all(self) -> Iterator[tuple[TxnPartition, TransactionMetadata]]:
        for entry in list(self.partitions.values()):
            for meta in list(entry.transactions.values()):
                yield entry, meta

    # ------------------------------------------------------------------ writes

    def write(self, meta: TransactionMetadata, transit: TxnTransit) -> ErrorCode:
        """Append ``transit``, then make it ``meta``'s state; on failure leave ``meta`` as it was."""
        partition = txn_partition_for(meta.transactional_id, self.ensure_topic())
        try:
            self._log.append(
                partition, encode_txn_key(meta.transactional_id), encode_txn_value(transit.to_log_value())
            )
        except KafkaError as exc:
            meta.abandon()
            log.warning("%s: writing %s failed: %s", meta.transactional_id, transit.state, exc)
            return append_error(exc)
        meta.complete(transit)
        return ErrorCode.none

    def remove(self, entry: TxnPartition, meta: TransactionMetadata) -> bool:
        """Tombstone an expired id (its Dead transit pending), then forget it."""
        try:
            self._log.append(entry.partition, encode_txn_key(meta.transactional_id), None)
        except KafkaError as exc:
            meta.abandon()
            log.warning("%s: expiring it failed: %s", meta.transactional_id, exc)
            return False
        entry.transactions.pop(meta.transactional_id, None)
        return True
