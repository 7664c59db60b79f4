"""Transactional offset commits (TxnOffsetCommit): pending until the transaction ends.

A producer's ``send_offsets_to_transaction`` commits a group's offsets inside
its transaction. As in Kafka, they are written to the group's
``__consumer_offsets`` partition at once, in a transactional batch carrying the
producer's id and epoch, but they are *pending*: OffsetFetch does not return
them (it answers ``UNSTABLE_OFFSET_COMMIT`` to a consumer that asks for stable
offsets) until the transaction's COMMIT marker reaches that partition, when
they become the group's committed offsets (visible once the in-sync replicas hold
the marker, :mod:`service.groups.pending`); an ABORT marker drops them.
:meth:`TransactionalOffsets.complete` is what the partition side calls when a
marker lands in ``__consumer_offsets``.

After a restart the replay of ``__consumer_offsets`` applies committed
transactions where their marker stands, drops aborted ones, and hands back
those still open (:meth:`TxnOffsetLog.open_transactions`), which become
pending again here.

Invariant: an offset is pending for at most one producer per group and
partition (a later commit of the same producer replaces it). Not thread-safe:
lives on the broker's event loop thread, like the coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from common.errors import ErrorCode, KafkaError
from service.groups.errors import storage_error
from service.groups.group import GroupMetadata, OffsetAndMetadata, TopicPartition
from service.groups.offsets import validate_offset_commit
from service.groups.records import (
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_offset_value,
    partition_for,
)
from service.groups.seams import OffsetLog, Timer
from service.groups.store import GroupStore

__all__ = ["TransactionalOffsets", "TxnOffsetLog"]

log = logging.getLogger("strata.groups")
E = ErrorCode


@runtime_checkable
class TxnOffsetLog(Protocol):
    """An :class:`~service.groups.seams.OffsetLog` that can also hold transactional batches."""

    def append_transactional(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        producer_id: int,
        producer_epoch: int,
    ) -> None:
        """Append the records as one transactional batch of that producer, or raise KafkaError."""
        ...

    def open_transactions(self) -> Mapping[tuple[int, int], Sequence[tuple[bytes, bytes | None]]]:
        """After replay: (partition, producer id) → records of transactions with no marker yet."""
        ...


class TransactionalOffsets:
    def __init__(self, store: GroupStore, log_: OffsetLog, timer: Timer) -> None:
        self._store = store
        self._log = log_ if isinstance(log_, TxnOffsetLog) else None
        self._timer = timer
        #: offsets partition → producer id → group id → partition → pending offset
        self._pending: dict[int, dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]]] = {}

    # ------------------------------------------------------------------ commit

    def commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
        metadata_max_bytes: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the offsets as pending offsets of the producer's transaction; a code per partition
        (OFFSET_METADATA_TOO_LARGE for metadata over ``metadata_max_bytes``, as Kafka)."""
        group = self._store.get(group_id)
        error = self._validate(group, generation_id, member_id, instance_id)
        if error is None and self._log is None:
            error = E.unsupported_version
        if error is not None:
            return dict.fromkeys(offsets, error)
        assert self._log is not None
        now = self._timer.now_ms()
        results = {
            tp: E.offset_metadata_too_large
            for tp, (_, _, metadata) in offsets.items()
            if metadata is not None and len(metadata.encode()) > metadata_max_bytes
        }
        accepted = {
            tp: OffsetAndMetadata(offset, epoch, metadata or "", now)
            for tp, (offset, epoch, metadata) in offsets.items()
            if tp not in results
        }
        if not accepted:
            return results
        records = [
            (
                encode_key(OffsetKey(group_id, t, p)),
                encode_offset_value(OffsetValue(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp)),
            )
            for (t, p), o in accepted.items()
        ]
        partition = partition_for(group_id, self._store.ensure_offsets_topic())
        try:
            self._log.append_transactional(partition, records, producer_id, producer_epoch)
        except KafkaError as exc:
            return {**results, **dict.fromkeys(accepted, storage_error(exc))}
        pending = self._pending.setdefault(partition, {}).setdefault(producer_id, {})
        pending.setdefault(group_id, {}).update(accepted)
        return {**results, **dict.fromkeys(accepted, E.none)}

    def _validate(
        self, group: GroupMetadata | None, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if group is None:  # Kafka creates an empty group for a commit at generation -1
            return E.illegal_generation if generation_id >= 0 else None
        return validate_offset_commit(group, generation_id, member_id, instance_id, transactional=True)

    # ------------------------------------------------------------------ markers

    def complete(self, offsets_partition: int, producer_id: int, committed: bool) -> int:
        """The marker of ``producer_id`` was just appended to ``offsets_partition``: the offsets
        become the group's once it is replicated (COMMIT), or go (ABORT); offsets committed."""
        by_group = self._pending.get(offsets_partition, {}).pop(producer_id, None)
        if not by_group:
            return 0
        if not committed:
            return 0
        applied = 0
        for group_id, offsets in by_group.items():
            group = self._store.get(group_id)
            if group is None:
                group = GroupMetadata(group_id, current_state_timestamp_ms=self._timer.now_ms())
            # visible once the in-sync replicas hold the marker, just appended (its records too)
            self._store.stage(group, offsets_partition, offsets, transactional=True)
            applied += len(offsets)
        return applied

    def on_markers(
        self, producer_id: int, producer_epoch: int, committed: bool, partitions: Sequence[int]
    ) -> None:
        """The partition side's completion hook for ``__consumer_offsets`` (``TxnCompletionHook``)."""
        for partition in partitions:
            self.complete(partition, producer_id, committed)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """True while an open transaction holds an offset of ``tp`` for the group, or one whose
        COMMIT marker is not replicated yet (not stable)."""
        if self._store.pending.holds(group_id, tp, transactional=True):
            return True
        try:
            partition = partition_for(group_id, self._store.ensure_offsets_topic())
        except KafkaError:
            return False
        return any(
            tp in by_group.get(group_id, {}) for by_group in self._pending.get(partition, {}).values()
        )

    def drop_topics(self, topics: Collection[str]) -> int:
        """Forget the pending offsets of deleted ``topics`` (Kafka's ``removeOffsets``): a
        transaction committed after the delete must not give a topic created again under the
        name the old one's offsets; how many."""
        dropped = 0
        for by_producer in self._pending.values():
            for by_group in by_producer.values():
                for offsets in by_group.values():
                    for tp in [tp for tp in offsets if tp[0] in topics]:
                        del offsets[tp]
                        dropped += 1
        return dropped

    # ------------------------------------------------------------------ load

    def unload(self, partition: int) -> None:
        """Forget the pending offsets of ``partition`` (another broker coordinates it now; it
        restores them from its replay)."""
        self._pending.pop(partition, None)

    def restore(
        self, open_transactions: Mapping[tuple[int, int], Sequence[tuple[bytes, bytes | None]]] | None = None
    ) -> int:
        """Pending offsets of transactions a replay found open (``open_transactions``, or the
        log's after its full replay); how many."""
        if open_transactions is None:
            if self._log is None:
                return 0
            open_transactions = self._log.open_transactions()
        count = 0
        for (partition, producer_id), records in open_transactions.items():
            for raw_key, raw_value in records:
                try:
                    key = decode_key(raw_key)
                    if not isinstance(key, OffsetKey) or raw_value is None:
                        continue
                    v = decode_offset_value(raw_value)
                except ValueError as exc:
                    log.warning("skipping an unreadable transactional offset record: %s", exc)
                    continue
                pending = self._pending.setdefault(partition, {}).setdefault(producer_id, {})
                pending.setdefault(key.group, {})[(key.topic, key.partition)] = OffsetAndMetadata(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                )
                count += 1
        if count:
            log.info("restored %d pending transactional offset(s)", count)
        return count
