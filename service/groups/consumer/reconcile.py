"""A member of a consumer-protocol group and its reconciliation (Kafka's CurrentAssignmentBuilder).

A :class:`ConsumerMember` is immutable: every change makes a new one with
:func:`dataclasses.replace`, so the coordinator can compute a member's next
state, persist it, and only then put it in the group.

:func:`reconcile` moves a member's *current* assignment towards the group's
*target* assignment without ever letting two members own a partition at once
(KIP-848's incremental protocol):

* partitions the member holds but the target does not are first asked back
  (state ``UNREVOKED_PARTITIONS``, the member keeps its epoch) and only when the
  member's heartbeat no longer lists them does it move on;
* partitions the target gives it that another member still holds (their
  *partition epoch* is not -1) are held back (state ``UNRELEASED_PARTITIONS``)
  until the previous owner has released them;
* otherwise the member takes the target epoch and is ``STABLE``.

Invariant: a partition is in at most one member's ``assigned`` or
``pending_revocation`` at a time (the group's partition epochs check it).
Pure functions; no I/O, no clock.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from common.errors import ErrorCode
from service.groups.consumer.records import ClassicMemberMetadata

__all__ = [
    "Assignment",
    "ConsumerMember",
    "MemberState",
    "OwnedPartitions",
    "reconcile",
]

#: topic id → partitions; the shape of every assignment (values sorted tuples).
Assignment = Mapping[uuid.UUID, tuple[int, ...]]
#: what a heartbeat reports as owned: None when the field was not sent.
OwnedPartitions = Mapping[uuid.UUID, Iterable[int]] | None


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState``: the int8 stored in the current-assignment record."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member as the records describe it (subscription, epochs, current assignment)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    #: set when the member speaks the classic protocol inside the group (Kafka 4's migration)
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int) -> ConsumerMember:
        """Kafka's ``updateMemberEpoch``: the previous epoch is remembered."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch)

    def owns_only_assigned(self, owned: OwnedPartitions) -> bool:
        """Whether ``owned`` is a subset of the assigned partitions (a lost epoch bump)."""
        if owned is None:
            return False
        return all(set(parts) <= set(self.assigned.get(t, ())) for t, parts in owned.items())


def _owns_any(owned: OwnedPartitions, partitions: Assignment) -> bool:
    if owned is None:
        return True  # unknown: assume it still holds them
    return any(set(parts) & set(partitions.get(t, ())) for t, parts in owned.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: OwnedPartitions,
) -> ConsumerMember:
    """The member's next state on the way to ``target`` (itself when it cannot move).

    ``partition_epoch(topic_id, partition)`` is the epoch of the member that
    holds the partition now, -1 when nobody does. ``owned`` is what the member's
    heartbeat says it owns. Raises :class:`FencedMemberEpoch` for a member in a
    state this version does not know that still holds partitions.
    """
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or any(owned.values()):
        raise FencedMemberEpoch("the member is in an unknown state: it must give up its partitions and rejoin")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


class FencedMemberEpoch(Exception):
    """The member must drop everything and rejoin (FENCED_MEMBER_EPOCH)."""

    code = ErrorCode.fenced_member_epoch


def _next_assignment(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: OwnedPartitions,
) -> ConsumerMember:
    unreleased = False
    keep: dict[uuid.UUID, tuple[int, ...]] = {}
    revoke: dict[uuid.UUID, tuple[int, ...]] = {}
    add: dict[uuid.UUID, tuple[int, ...]] = {}
    for topic_id in set(target) | set(member.assigned):
        wanted = set(target.get(topic_id, ()))
        current = set(member.assigned.get(topic_id, ()))
        kept = current & wanted
        revoked = current - kept
        pending_revocation = set(member.pending_revocation.get(topic_id, ()))
        new = set()
        for p in wanted - kept:
            # Held by someone else (not by this member on its way out): wait for it.
            if partition_epoch(topic_id, p) != -1 and p not in pending_revocation:
                unreleased = True
            else:
                new.add(p)
        if kept:
            keep[topic_id] = tuple(sorted(kept))
        if revoked:
            revoke[topic_id] = tuple(sorted(revoked))
        if new:
            add[topic_id] = tuple(sorted(new))
    if revoke and _owns_any(owned, revoke):
        return replace(
            member.with_epoch(epoch),
            state=MemberState.UNREVOKED_PARTITIONS, assigned=keep, pending_revocation=revoke,
        )
    if add:
        for topic_id, parts in add.items():
            keep[topic_id] = tuple(sorted(set(keep.get(topic_id, ())) | set(parts)))
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return replace(member.with_epoch(target_epoch), state=state, assigned=keep,
                   pending_revocation={})
