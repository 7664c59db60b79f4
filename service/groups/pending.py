"""Committed offsets written to ``__consumer_offsets`` but not yet replicated: :class:`PendingOffsets`.

An OffsetCommit (or a transaction's COMMIT marker over its TxnOffsetCommits) is
appended to the group's ``__consumer_offsets`` partition on the leader at once,
but it only counts once the in-sync replicas hold it: until then a failover
could lose it, and a coordinator that had served it would have told clients an
offset the next coordinator does not have (committed offsets going backwards).
So, as Kafka's coordinators do (the classic ``GroupMetadataManager``'s pending
offset commits; the new coordinator's reads at the last committed offset), the
offsets wait here, in append order per partition, with the offset their records
end before; :meth:`PendingOffsets.take_replicated` hands over those the
partition's replicated offset (its high watermark, with ``min.insync.replicas``
in the ISR) has passed, and only then do they become the group's committed
offsets that OffsetFetch, DescribeGroups-like views and lag read.

A write that never replicates is never served: it stays here until the
partition's leadership moves (:meth:`PendingOffsets.drop_partition`: the next
leader's log is the truth), so the previous offset stays visible. One that
replicates late, after its request was answered with an error, becomes visible
then, as in Kafka: the log holds it, and every later coordinator loads it.

Invariant: the writes of a partition are kept in append order, so their end
offsets increase. Not thread-safe: the broker's event loop thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from service.groups.group import GroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = ["PendingOffsets", "PendingWrite", "Replication"]


@dataclass(slots=True)
class PendingWrite:
    """Offsets of one group whose records end before ``end`` in their partition."""

    end: int
    group: GroupMetadata
    offsets: dict[TopicPartition, OffsetAndMetadata]
    #: the COMMIT marker of a transaction (KIP-447: not stable until replicated)
    transactional: bool = False


class Replication(Protocol):
    """What the broker's runtime sees of the coordinator's writes waiting for the ISR
    (:class:`~service.groups.store.GroupStore` has it)."""

    #: called with a partition when a write of it starts waiting for the ISR
    on_pending: Callable[[int], None] | None

    def pending_end(self, partition: int) -> int | None:
        """The offset the oldest write of ``partition`` waiting for the ISR ends before (None: none)."""
        ...

    def replicated(self, partition: int, offset: int) -> int:
        """The ISR of ``partition`` holds every offset below ``offset``: the offsets written
        before it become visible; how many."""
        ...


class PendingOffsets:
    """See the module docstring."""

    def __init__(self) -> None:
        #: __consumer_offsets partition → its writes not yet replicated, in append order
        self._writes: dict[int, deque[PendingWrite]] = {}

    def add(self, partition: int, write: PendingWrite) -> None:
        self._writes.setdefault(partition, deque()).append(write)

    def first_end(self, partition: int) -> int | None:
        """The end offset of the oldest write of ``partition`` waiting for the ISR, or None."""
        writes = self._writes.get(partition)
        return writes[0].end if writes else None

    def take_replicated(self, partition: int, offset: int) -> list[PendingWrite]:
        """Remove and return the writes of ``partition`` that end at or before ``offset``."""
        writes = self._writes.get(partition)
        done: list[PendingWrite] = []
        while writes and writes[0].end <= offset:
            done.append(writes.popleft())
        if not writes:
            self._writes.pop(partition, None)
        return done

    def drop_partition(self, partition: int) -> int:
        """Forget the writes of ``partition`` (its leadership moved); how many."""
        return len(self._writes.pop(partition, ()))

    def clear(self) -> None:
        """Forget every write (the coordinator shuts down)."""
        self._writes.clear()

    def drop(self, group_id: str, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Forget the group's pending offsets of ``partitions`` (None: all of them): a later
        tombstone in the log removes them anyway."""
        wanted = None if partitions is None else set(partitions)
        for index, writes in list(self._writes.items()):
            for write in writes:
                if write.group.group_id != group_id:
                    continue
                for tp in list(write.offsets):
                    if wanted is None or tp in wanted:
                        del write.offsets[tp]
            kept = deque(w for w in writes if w.offsets)
            if kept:
                self._writes[index] = kept
            else:
                del self._writes[index]

    def partitions_of(self, group_id: str) -> set[TopicPartition]:
        """The partitions the group has an offset of waiting for the ISR."""
        return {
            tp
            for writes in self._writes.values()
            for w in writes
            if w.group.group_id == group_id
            for tp in w.offsets
        }

    def holds(self, group_id: str, tp: TopicPartition, transactional: bool = False) -> bool:
        """Whether an offset of ``tp`` for the group waits for the ISR (``transactional``: a
        transaction's, committed by its marker)."""
        return any(
            w.group.group_id == group_id and tp in w.offsets and (w.transactional or not transactional)
            for writes in self._writes.values()
            for w in writes
        )

    def __len__(self) -> int:
        return sum(len(writes) for writes in self._writes.values())
