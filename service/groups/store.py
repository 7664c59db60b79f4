"""Every group of the coordinator, and their persistence in ``__consumer_offsets``.

:class:`GroupStore` holds the registry of groups and is the only writer of the
offsets log (:class:`service.groups.seams.OffsetLog`): group metadata after a
rebalance, committed offsets, and tombstones for removed offsets and deleted
groups, in Kafka's record format (:mod:`service.groups.records`), each group's
records in the partition :func:`~service.groups.records.partition_for` picks.

Invariant: a write reaches the log before it takes effect in memory; an append
that fails raises :class:`~common.errors.KafkaError` and leaves the groups as
they were. Committed offsets take effect later still: only once the in-sync
replicas hold them (:mod:`service.groups.pending`; the broker tells
:meth:`GroupStore.replicated`), so what is served never goes back after a
failover. :meth:`GroupStore.load` rebuilds the registry from the log at start
(Kafka's ``GroupMetadataManager`` loading a partition); restored members get
their session timers from the coordinator, not from here.

Not thread-safe: lives on the broker's event loop thread, like the coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from common.errors import KafkaError
from service.groups.group import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
    TopicPartition,
)
from service.groups.pending import PendingOffsets, PendingWrite
from service.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    partition_for,
)
from service.groups.seams import OffsetLog, ReplicatedLog, cancel

__all__ = ["GroupStore"]

log = logging.getLogger("strata.groups")


class GroupStore:
    def __init__(self, log_: OffsetLog) -> None:
        self._log = log_
        #: group id → group, in creation (or load) order
        self.groups: dict[str, GroupMetadata] = {}
        self._partitions: int | None = None
        #: committed offsets in the log that the in-sync replicas do not hold yet
        self.pending = PendingOffsets()
        #: called with a partition when a write of it starts waiting for the ISR (the
        #: broker's runtime then waits and calls :meth:`replicated`)
        self.on_pending: Callable[[int], None] | None = None

    def get(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def ensure_offsets_topic(self) -> int:
        """Create ``__consumer_offsets`` when missing (once); its partition count."""
        if self._partitions is None:
            self._partitions = self._log.ensure()
        return self._partitions

    # ------------------------------------------------------------------ load

    def load(
        self,
        now_ms: int,
        other: Callable[[bytes, bytes | None], bool] | None = None,
        records: Iterable[tuple[bytes, bytes | None]] | None = None,
    ) -> int:
        """Rebuild groups and committed offsets from the log (or from ``records``, one
        partition's, read beforehand off the event loop); the number of records read.

        ``other`` sees every record first and returns True for those it takes
        (the consumer group protocol's, :mod:`service.groups.consumer`).
        """
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        metadata: dict[str, GroupMetadataValue] = {}
        count = 0
        for raw_key, raw_value in self._log.replay() if records is None else records:
            count += 1
            if other is not None and other(raw_key, raw_value):
                continue
            try:
                key = decode_key(raw_key)
                if isinstance(key, OffsetKey):
                    group_offsets = offsets.setdefault(key.group, {})
                    tp = (key.topic, key.partition)
                    if raw_value is None:
                        group_offsets.pop(tp, None)
                    else:
                        v = decode_offset_value(raw_value)
                        group_offsets[tp] = OffsetAndMetadata(
                            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                        )
                elif raw_value is None:
                    # Offsets have tombstones of their own (DeleteGroups, expiry); a group
                    # converted to the consumer protocol keeps them.
                    metadata.pop(key.group, None)
                else:
                    metadata[key.group] = decode_group_value(raw_value)
            except ValueError as exc:
                log.warning("skipping an unreadable __consumer_offsets record: %s", exc)
        for group_id in set(offsets) | set(metadata):
            group = GroupMetadata(group_id, current_state_timestamp_ms=now_ms)
            value = metadata.get(group_id)
            if value is not None:
                _restore(group, value)
            group.offsets = offsets.get(group_id, {})
            if value is None and not group.offsets:
                continue
            self.groups[group_id] = group
        if count:
            log.info("loaded %d group(s) from %d __consumer_offsets record(s)", len(self.groups), count)
        return count

    def partition_of(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group_id``'s records."""
        return partition_for(group_id, self.ensure_offsets_topic())

    def unload(self, partition: int) -> list[GroupMetadata]:
        """Forget the groups of ``partition`` (this broker no longer coordinates them);
        the groups removed, for the coordinator to stop their timers."""
        self.pending.drop_partition(partition)
        if self._partitions is None:
            return []
        gone = [g for g in self.groups.values() if partition_for(g.group_id, self._partitions) == partition]
        for group in gone:
            del self.groups[group.group_id]
        return gone

    # ------------------------------------------------------------------ writes

    def store_group(self, group: GroupMetadata) -> None:
        """Persist the group's generation, protocol, leader and members (with assignments)."""
        self._append(group.group_id, [self.metadata_record(group)])

    @staticmethod
    def metadata_record(group: GroupMetadata, tombstone: bool = False) -> tuple[bytes, bytes | None]:
        """The encoded GroupMetadata record of ``group`` (or its tombstone), not appended: the
        online migration writes it in one append with the consumer group's records."""
        key = encode_key(GroupMetadataKey(group.group_id))
        if tombstone:
            return key, None
        value = GroupMetadataValue(
            group.protocol_type or "",
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            group.current_state_timestamp_ms,
            tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(group.protocol_name),
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )
        return key, encode_group_value(value)

    def try_store_group(self, group: GroupMetadata) -> None:
        """:meth:`store_group`, logging a failure instead of raising it."""
        try:
            self.store_group(group)
        except KafkaError as exc:
            log.warning("group %s: could not persist its metadata: %s", group.group_id, exc)

    def commit_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """Persist ``offsets``, then register ``group`` (if new) and apply them."""
        records = [
            (
                encode_key(OffsetKey(group.group_id, tp[0], tp[1])),
                encode_offset_value(
                    OffsetValue(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp)
                ),
            )
            for tp, o in offsets.items()
        ]
        partition = self._append(group.group_id, records)
        self.stage(group, partition, dict(offsets))

    def stage(
        self,
        group: GroupMetadata,
        partition: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        transactional: bool = False,
    ) -> None:
        """Offsets whose records were just appended to ``partition`` (the last append):
        they take effect once the in-sync replicas hold them, at once if they already do."""
        if not isinstance(self._log, ReplicatedLog):
            self._apply(group, offsets)
            return
        end = self._log.end_offset(partition)
        self.pending.add(partition, PendingWrite(end, group, offsets, transactional))
        if self._log.replicated(partition, end):  # a single replica: the earlier ones are too
            self.replicated(partition, end)
        elif self.on_pending is not None:
            self.on_pending(partition)

    def replicated(self, partition: int, offset: int) -> int:
        """The in-sync replicas of ``partition`` hold every offset below ``offset``: the
        offsets written there before it take effect; how many."""
        applied = 0
        for write in self.pending.take_replicated(partition, offset):
            self._apply(write.group, write.offsets)
            applied += len(write.offsets)
        return applied

    def pending_end(self, partition: int) -> int | None:
        """The offset the oldest write of ``partition`` still waiting for the ISR ends before."""
        return self.pending.first_end(partition)

    def _apply(self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Make ``offsets`` the group's committed offsets (registering a group new here)."""
        if offsets:
            self.groups.setdefault(group.group_id, group).offsets.update(offsets)

    def known_partitions(self, group: GroupMetadata) -> set[TopicPartition]:
        """The partitions the group has a committed offset of, replicated or not yet."""
        return set(group.offsets) | self.pending.partitions_of(group.group_id)

    def remove_offsets(self, group: GroupMetadata, partitions: Sequence[TopicPartition]) -> None:
        """Tombstone the committed offsets of ``partitions``, then forget them (pending ones
        too: they come before the tombstones in the log)."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in partitions
        ]
        self._append(group.group_id, records)
        self.pending.drop(group.group_id, partitions)
        for tp in partitions:
            group.offsets.pop(tp, None)

    def delete_group(self, group: GroupMetadata, now_ms: int) -> None:
        """Tombstone the group and all its offsets, then mark it Dead and drop it."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in self.known_partitions(group)
        ]
        records.append((encode_key(GroupMetadataKey(group.group_id)), None))
        self._append(group.group_id, records)
        self.pending.drop(group.group_id)
        group.transition_to(GroupState.DEAD, now_ms)
        group.offsets.clear()
        cancel(group.join_timer)
        for handle in group.pending_members.values():
            cancel(handle)
        self.groups.pop(group.group_id, None)

    def tombstone_classic_metadata(self, group: GroupMetadata) -> None:
        """End the classic metadata of an empty group (it becomes a consumer group); offsets stay."""
        self._append(group.group_id, [self.metadata_record(group, tombstone=True)])
        self.forget_classic(group)

    @staticmethod
    def forget_classic(group: GroupMetadata) -> None:
        """Drop the classic members and timers of a group now run by the consumer protocol
        (its offsets stay); their parked requests must have been answered."""
        cancel(group.join_timer)
        group.join_timer = None
        for handle in group.pending_members.values():
            cancel(handle)
        group.pending_members.clear()
        for member in group.members.values():
            cancel(member.heartbeat_timer)
        group.members.clear()
        group.static_members.clear()
        group.leader_id = None
        group.state = GroupState.EMPTY

    def append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append encoded records of ``group_id`` (the consumer group protocol's) to its partition."""
        self._append(group_id, records)

    def _append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Append to the group's partition; that partition."""
        partition = partition_for(group_id, self.ensure_offsets_topic())
        self._log.append(partition, records)
        return partition


def _restore(group: GroupMetadata, value: GroupMetadataValue) -> None:
    """Members, generation and protocol of a group as its last metadata record left them."""
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    if value.current_state_timestamp >= 0:
        group.current_state_timestamp_ms = value.current_state_timestamp
    for m in value.members:
        group.add(
            MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout, m.session_timeout, value.protocol_type,
                [(value.protocol or "", m.subscription)], assignment=m.assignment,
            )
        )
    group.leader_id = value.leader if value.leader in group.members else group.leader_id
    if group.members:
        group.state = GroupState.STABLE
