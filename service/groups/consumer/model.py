"""One consumer-protocol group (KIP-848) as its records leave it: Kafka's ``ConsumerGroup``.

The group is changed only by :meth:`ConsumerGroup.replay` of a record of
:mod:`service.groups.consumer.records`, both when the coordinator has just
written the record and when the broker replays ``__consumer_offsets`` at start,
so the state after a restart is the state the records describe.

Epochs: the *group epoch* is bumped whenever the members or their
subscriptions (or the subscribed topics' metadata) change; the *target
assignment epoch* is the group epoch the current target was computed for; a
member's *member epoch* is the target epoch it has reconciled to.

States (Kafka's ``ConsumerGroupState``): ``Empty`` (no members),
``Assigning`` (group epoch > target epoch), ``Reconciling`` (some member not
yet at the target epoch, or not ``STABLE``), ``Stable``.

Invariants: ``partition_epochs`` maps every partition some member holds
(assigned or pending revocation) to that member's epoch, and a partition is
held by one member at most; ``static_members`` maps an instance id to the
member id holding it. Not thread-safe: the event loop owns it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from service.groups.consumer.reconcile import Assignment, ConsumerMember, MemberState
from service.groups.consumer.records import (
    ConsumerRecord,
    CurrentAssignmentRecord,
    CurrentValue,
    GroupEpochRecord,
    MemberRecord,
    MemberValue,
    PartitionMetadataRecord,
    RegexRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)

__all__ = ["ConsumerGroup", "ResolvedRegex", "current_record", "member_record"]


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    target_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    #: member id → (session timer, rebalance timer); handles from the coordinator's Timer
    timers: dict[str, list[Any]] = field(default_factory=dict)
    #: set by a ConsumerGroupMetadata tombstone: the group was deleted or converted
    deleted: bool = False
    #: last time the group became empty (offset expiry counts from it)
    empty_since_ms: int = -1
    #: the classic group this one replaces, until the records of the upgrade are written
    converted_from: Any = None

    # -- reads ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.target_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.target_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """The member's target; a static member new to it gets its instance's (Kafka's)."""
        found = self.target.get(member_id)
        if found is None and instance_id is not None and instance_id in self.static_members:
            found = self.target.get(self.static_members[instance_id])
        return found or {}

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topic_names(self) -> set[str]:
        """Topics some member subscribes to, by name or through a resolved regex."""
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                resolved = self.regexes.get(m.subscribed_topic_regex)
                if resolved is not None:
                    names.update(resolved.topics)
        return names

    def subscribed_regexes(self, members: Iterable[ConsumerMember] | None = None) -> set[str]:
        source = self.members.values() if members is None else members
        return {m.subscribed_topic_regex for m in source if m.subscribed_topic_regex}

    def is_empty(self) -> bool:
        return not self.members

    def classic_members(self) -> list[ConsumerMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Kafka's ``waitingOnUnreleasedPartition``: a partition of the member's target that it
        does not have yet is still held by another member."""
        for topic_id, parts in self.target_of(member.member_id, member.instance_id).items():
            mine = set(member.assigned.get(topic_id, ()))
            if any(p not in mine and self.partition_epoch(topic_id, p) != -1 for p in parts):
                return True
        return False

    # -- replay --------------------------------------------------------------------

    def replay(self, record: ConsumerRecord, now_ms: int = -1) -> None:
        """Apply one record (already durable) to the in-memory group."""
        if isinstance(record, GroupEpochRecord):
            if record.epoch is None:
                self.deleted = True
            else:
                self.deleted = False
                self.group_epoch, self.metadata_hash = record.epoch, record.metadata_hash
        elif isinstance(record, MemberRecord):
            self._replay_member(record, now_ms)
        elif isinstance(record, TargetEpochRecord):
            self.target_epoch = record.assignment_epoch or 0
        elif isinstance(record, TargetMemberRecord):
            if record.partitions is None:
                self.target.pop(record.member, None)
            else:
                self.target[record.member] = dict(record.partitions)
        elif isinstance(record, CurrentAssignmentRecord):
            self._replay_current(record)
        elif isinstance(record, RegexRecord):
            if record.topics is None:
                self.regexes.pop(record.regex, None)
            else:
                self.regexes[record.regex] = ResolvedRegex(
                    frozenset(record.topics), record.version, record.timestamp)
        elif isinstance(record, PartitionMetadataRecord):
            pass  # replaced by the metadata hash in Kafka 4.1; nothing to keep

    def _replay_member(self, record: MemberRecord, now_ms: int) -> None:
        old = self.members.get(record.member)
        if record.value is None:
            if old is not None:
                self._release(old)
                del self.members[record.member]
                if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                    del self.static_members[old.instance_id]
                if not self.members:
                    self.empty_since_ms = now_ms
            return
        v = record.value
        base = old or ConsumerMember(record.member)
        member = replace(
            base, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
            client_host=v.client_host, subscribed_topic_names=tuple(v.subscribed_topic_names),
            subscribed_topic_regex=v.subscribed_topic_regex or None,
            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor,
            classic=v.classic,
        )
        self.members[record.member] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def _replay_current(self, record: CurrentAssignmentRecord) -> None:
        old = self.members.get(record.member)
        if record.value is None:
            if old is not None:
                self._release(old)
                self.members[record.member] = replace(
                    old, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                    assigned={}, pending_revocation={})
            return
        c = record.value
        base = old or ConsumerMember(record.member)
        if old is not None:
            self._release(old)
        member = replace(base, member_epoch=c.member_epoch, previous_member_epoch=c.previous_member_epoch,
                         state=MemberState.of(c.state), assigned=dict(c.assigned),
                         pending_revocation=dict(c.pending_revocation))
        self.members[record.member] = member
        self._hold(member)

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    self.partition_epochs.pop((t, p), None)

    def _hold(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = member.member_epoch


def member_record(group_id: str, m: ConsumerMember) -> MemberRecord:
    """The ConsumerGroupMemberMetadata record of ``m``'s subscription."""
    return MemberRecord(group_id, m.member_id, MemberValue(
        m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
        m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic))


def current_record(group_id: str, m: ConsumerMember) -> CurrentAssignmentRecord:
    """The ConsumerGroupCurrentMemberAssignment record of ``m``'s epochs and assignment."""
    return CurrentAssignmentRecord(group_id, m.member_id, CurrentValue(
        m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned, m.pending_revocation))
