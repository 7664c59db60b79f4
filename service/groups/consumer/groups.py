"""The consumer-protocol groups of the coordinator: registry, persistence, admin reads.

:class:`ConsumerGroups` holds every :class:`~service.groups.consumer.model.ConsumerGroup`
and is the one path by which their records reach ``__consumer_offsets``:
:meth:`ConsumerGroups.write` encodes the records, appends them through the
:class:`~service.groups.store.GroupStore` (the log's only writer) and only then
replays them into memory; :meth:`ConsumerGroups.replay` is also what the load
at start calls for every consumer-group record, in log order.

A consumer group's committed offsets stay where every group's are: in the
store's :class:`~service.groups.group.GroupMetadata` of the same id, which
then has no classic members and points at the consumer group
(``GroupMetadata.consumer``), so offset commit, fetch, delete and expiry work
the same for both kinds of group.

Conversions (Kafka 4's, for *empty* groups, whatever
``group.consumer.migration.policy`` says): a ConsumerGroupHeartbeat to an
empty classic group turns it into a consumer group (a tombstone for the classic
metadata, offsets kept); a JoinGroup to an empty consumer group turns it back.
Groups with members are converted by :mod:`service.groups.consumer.classic`.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode
from service.groups.consumer.model import ConsumerGroup
from service.groups.consumer.reconcile import Assignment
from service.groups.consumer.records import (
    ConsumerRecord,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberRecord,
    RegexRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    decode,
    encode,
)
from service.groups.errors import GroupIdNotFoundError
from service.groups.group import CONSUMER_PROTOCOL_TYPE, GroupMetadata
from service.groups.seams import Timer, TopicsImage, cancel
from service.groups.store import GroupStore

__all__ = ["ConsumerGroups", "DescribedConsumerGroup", "DescribedMember", "tombstones"]

log = logging.getLogger("strata.groups")
E = ErrorCode


NamedAssignment = tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: NamedAssignment
    target: NamedAssignment
    classic: bool = False  # a classic member inside the consumer group (Kafka 4's migration)


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    """What ConsumerGroupDescribe answers for one group (and the CLI and HTTP side show)."""

    group_id: str
    error: ErrorCode
    message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[DescribedMember, ...] = ()


class ConsumerGroups:
    def __init__(self, store: GroupStore, timer: Timer, topics: TopicsImage) -> None:
        self._store = store
        self._timer = timer
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}
        #: a classic group with members, and the records so far: the consumer group it becomes
        #: (not registered yet) or GroupIdNotFoundError (Kafka's online upgrade; classic.py)
        self.upgrade: Callable[[GroupMetadata, list[ConsumerRecord]], ConsumerGroup] | None = None

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    # ------------------------------------------------------------------ persistence

    def write(self, group_id: str, records: Sequence[ConsumerRecord], *, converting: GroupMetadata | None = None,
              then: Sequence[tuple[bytes, bytes | None]] = ()) -> None:
        """Append ``records`` (raises KafkaError, changing nothing), then apply them.

        ``converting``: the classic group these records replace (its metadata tombstone goes
        first in the same append, and its members are dropped once it succeeded); ``then``:
        encoded records appended after them (a classic group replacing this one)."""
        if not records and not then:
            return
        first = [GroupStore.metadata_record(converting, tombstone=True)] if converting is not None else []
        self._store.append(group_id, first + [encode(r) for r in records] + list(then))
        if converting is not None:
            GroupStore.forget_classic(converting)
        for record in records:
            self.replay(record)

    def replay(self, record: ConsumerRecord) -> None:
        """Apply one durable record; a group-epoch tombstone ends the group."""
        group_id = record.group
        if isinstance(record, GroupEpochRecord) and record.epoch is None:
            group = self.groups.pop(group_id, None)
            if group is not None:
                for handles in group.timers.values():
                    for handle in handles:
                        cancel(handle)
            holder = self._store.get(group_id)
            if holder is not None and holder.consumer is group:
                holder.consumer = None
            return
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id, empty_since_ms=self._timer.now_ms())
        group.replay(record, self._timer.now_ms())
        self._attach(group)

    def replay_raw(self, key: bytes, value: bytes | None) -> None:
        """The load's hook: one consumer-group record as read from the log."""
        try:
            self.replay(decode(key, value))
        except ValueError as exc:
            log.warning("skipping an unreadable consumer group record: %s", exc)

    def finish_load(self) -> None:
        """After the replay: drop half-written groups, hand out the offset holders."""
        for group_id, group in list(self.groups.items()):
            if group.group_epoch == 0 and not group.members:
                del self.groups[group_id]
            else:
                self._attach(group)
        if self.groups:
            log.info("loaded %d consumer-protocol group(s)", len(self.groups))

    def _attach(self, group: ConsumerGroup) -> None:
        """The store's GroupMetadata of the same id holds the offsets and points here."""
        holder = self._store.get(group.group_id)
        if holder is None:
            holder = GroupMetadata(group.group_id, current_state_timestamp_ms=self._timer.now_ms())
            self._store.groups[group.group_id] = holder
        holder.consumer = group
        holder.protocol_type = CONSUMER_PROTOCOL_TYPE
        if not group.members:
            holder.current_state_timestamp_ms = group.empty_since_ms

    # ------------------------------------------------------------------ conversions

    def get_or_create(
        self, group_id: str, create: bool, records: list[ConsumerRecord]
    ) -> ConsumerGroup:
        """Kafka's ``getOrMaybeCreateConsumerGroup``: a new group is not registered yet.

        An empty classic group is converted (its classic metadata gets a tombstone,
        its offsets stay); a classic group with members goes through :attr:`upgrade`
        (GROUP_ID_NOT_FOUND when there is none or it may not upgrade, as Kafka).
        """
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self._store.get(group_id)
        if not create:
            raise GroupIdNotFoundError(f"consumer group {group_id} not found")
        if classic is not None and classic.consumer is None and classic.members:
            if self.upgrade is None:
                raise GroupIdNotFoundError(f"group {group_id} is a classic group with members")
            return self.upgrade(classic, records)
        if classic is not None and classic.consumer is None:
            self._store.tombstone_classic_metadata(classic)
            log.info("group %s: converted the empty classic group to a consumer group", group_id)
        return ConsumerGroup(group_id, empty_since_ms=self._timer.now_ms())

    def convert_to_classic(self, group: ConsumerGroup) -> None:
        """Kafka's ``maybeDeleteEmptyConsumerGroup``: an empty consumer group ends here."""
        assert not group.members
        self.write(group.group_id, tombstones(group))
        holder = self._store.get(group.group_id)
        if holder is not None:
            holder.consumer = None
            holder.protocol_type = None
        log.info("group %s: converted the empty consumer group to a classic group", group.group_id)

    # ------------------------------------------------------------------ admin

    def delete(self, group: ConsumerGroup) -> None:
        """DeleteGroups of an empty consumer group: its records get tombstones."""
        self.write(group.group_id, tombstones(group))

    def assignor_name(self, group: ConsumerGroup, default: str) -> str:
        counts: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        return max(counts, key=lambda n: counts[n]) if counts else default

    def named(self, assignment: Assignment) -> NamedAssignment:
        """``(topic id, name, partitions)`` of an assignment, topics that still exist."""
        out = []
        for topic_id, parts in sorted(assignment.items(), key=lambda kv: str(kv[0])):
            found = self.topics.by_id(topic_id)
            if found is not None:
                out.append((topic_id, found[0], tuple(parts)))
        return tuple(out)

    def describe(self, group_id: str, default_assignor: str) -> DescribedConsumerGroup:
        """Kafka's ``ConsumerGroup.asDescribedGroup``; GROUP_ID_NOT_FOUND for any other group."""
        group = self.groups.get(group_id)
        if group is None:
            return DescribedConsumerGroup(group_id, E.group_id_not_found,
                                          f"Group {group_id} is not a consumer group.")
        members = tuple(
            DescribedMember(m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id,
                            m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
                            self.named(m.assigned), self.named(group.target_of(m.member_id)),
                            m.classic is not None)
            for m in group.members.values()
        )
        return DescribedConsumerGroup(group_id, E.none, None, group.state, group.group_epoch,
                                      group.target_epoch, self.assignor_name(group, default_assignor),
                                      members)

    def list(self, states: Iterable[str] = ()) -> list[tuple[str, str]]:
        """``(group_id, state)`` of every consumer group, optionally by state (any case)."""
        wanted = {s.lower() for s in states}
        return [(g.group_id, g.state) for g in self.groups.values()
                if not wanted or g.state.lower() in wanted]

    # ------------------------------------------------------------------ offsets

    def validate_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int,
        transactional: bool = False, instance_id: str | None = None,
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: OffsetCommit, or TxnOffsetCommit
        (``transactional``), whose member id, epoch and instance id are optional together."""
        if member_epoch < 0 and not group.members:
            return None  # an admin client or a consumer outside the group
        if transactional and member_epoch == -1 and not member_id and instance_id is None:
            return None  # a producer that does not pass its consumer's group metadata
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if not transactional and api_version < 9 and member.classic is None:
            return E.unsupported_version  # consumer-protocol members must commit with v9+
        if member_epoch != member.member_epoch:  # a classic member sent its generation
            return E.illegal_generation if member.classic is not None else E.stale_member_epoch
        return None

    def validate_fetch(
        self, group: ConsumerGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+)."""
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return E.unknown_member_id
        if member_epoch != member.member_epoch:
            return E.stale_member_epoch
        return None


def tombstones(group: ConsumerGroup) -> list[ConsumerRecord]:
    """Every record that deletes ``group`` (members first, the group epoch last, as Kafka)."""
    gid = group.group_id
    out: list[ConsumerRecord] = []
    for member_id in group.members:
        out += [CurrentAssignmentRecord(gid, member_id, None), TargetMemberRecord(gid, member_id, None),
                MemberRecord(gid, member_id, None)]
    out += [TargetMemberRecord(gid, m, None) for m in group.target if m not in group.members]
    out += [RegexRecord(gid, regex, None) for regex in group.regexes]
    out += [TargetEpochRecord(gid, None), GroupEpochRecord(gid, None)]
    return out

