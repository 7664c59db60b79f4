"""ConsumerGroupHeartbeat (KIP-848), sans I/O: Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``.

One heartbeat does, in this order, and writes every change as records before
any of it takes effect (:meth:`ConsumerGroups.write`):

1. **member**: create (epoch 0), look up (checking its epoch: a greater one, or
   a smaller one that is not the previous epoch with a subset of the assignment,
   is FENCED_MEMBER_EPOCH), or replace a static member that left with epoch -2
   (UNRELEASED_INSTANCE_ID while the old one has not left); a changed member gets
   a member record, and a changed subscription (topic names, regex) or changed
   subscribed-topic metadata (:func:`metadata_hash`) bumps the *group epoch*;
2. **target**: when the group epoch is ahead of the target assignment epoch, the
   group's assignor (the one most members ask for, else the first of
   ``group.consumer.assignors``) computes a new target for every member; only
   the members whose target changed get a record;
3. **reconcile**: the member moves towards its target
   (:func:`~service.groups.consumer.reconcile.reconcile`); a member asked to
   revoke partitions gets ``rebalance_timeout_ms`` to do it or is fenced.

Epoch -1 leaves (the member's records get tombstones, the group epoch is
bumped); -2 is a static member leaving for a while (it keeps its partitions
until it comes back or its session ends). A member that does not heartbeat
within ``group.consumer.session.timeout.ms`` is fenced the same way.
Regular expressions (SubscribedTopicRegex) are Python's ``re`` with
``fullmatch``, as Kafka's RE2/J ``matches()``; resolved when first seen and
again whenever the topics change.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from common.errors import ErrorCode, KafkaError
from service.groups.consumer.assignors import ASSIGNORS, MemberSpec
from service.groups.consumer.groups import ConsumerGroups
from service.groups.consumer.model import ConsumerGroup, current_record, member_record
from service.groups.consumer.reconcile import (
    Assignment,
    ConsumerMember,
    FencedMemberEpoch,
    MemberState,
    OwnedPartitions,
    reconcile,
)
from service.groups.consumer.records import (
    ConsumerRecord,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberRecord,
    RegexRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from service.groups.consumer.requests import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerHeartbeat,
    HeartbeatResult,
    check_epoch,
    validate,
)
from service.groups.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    storage_error,
)
from service.groups.records import OFFSETS_TOPIC
from service.groups.requests import GroupConfig
from service.groups.seams import Timer, cancel

__all__ = ["Heartbeats", "answer_code", "metadata_hash"]

log = logging.getLogger("strata.groups")
E = ErrorCode


def metadata_hash(group: ConsumerGroups, topic_names: set[str]) -> int:
    """A 63-bit digest of the subscribed topics' ids and partition counts (0: none exist).

    Kafka 4.1 keeps such a hash in the group metadata record (KIP-1101); a
    different value makes the group compute a new target assignment.
    """
    h = hashlib.blake2b(digest_size=8)
    seen = False
    for name in sorted(topic_names):
        found = group.topics.by_name(name)
        if found is not None:
            seen = True
            h.update(name.encode() + b"\0" + found[0].bytes + found[1].to_bytes(4, "big"))
    return int.from_bytes(h.digest(), "big") >> 1 if seen else 0


def answer_code(exc: KafkaError) -> ErrorCode:
    """The code a group request answers for ``exc`` (a failed write as Kafka maps it)."""
    if exc.code in (E.kafka_storage_error, E.not_enough_replicas, E.message_too_large,
                    E.record_list_too_large, E.unknown_topic_or_partition):
        return storage_error(exc)
    return exc.code


class Heartbeats:
    def __init__(self, groups: ConsumerGroups, timer: Timer, config: GroupConfig) -> None:
        self._groups = groups
        self._timer = timer
        self._config = config
        #: ``(group, leaving member, reason) -> handled``: the classic side's online downgrade
        self.downgrade: Callable[[ConsumerGroup, ConsumerMember, str], bool] | None = None

    # ------------------------------------------------------------------ entry

    def heartbeat(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        """Answer one heartbeat; every error is a Kafka error code in the result."""
        try:
            validate(req, self._config.consumer_assignors)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req)
            return self._heartbeat(req)
        except FencedMemberEpoch as exc:
            return HeartbeatResult(E.fenced_member_epoch, str(exc))
        except KafkaError as exc:
            return HeartbeatResult(answer_code(exc), exc.message)

    # ------------------------------------------------------------------ regular heartbeat

    def _heartbeat(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        records: list[ConsumerRecord] = []
        joining = req.member_epoch == 0
        group = self._groups.get_or_create(req.group_id, joining, records)
        member_id = req.member_id or str(uuid.uuid4())  # v0: the coordinator may pick it
        if len(group.members) >= self._config.consumer_max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {self._config.consumer_max_size} members.")
        if req.instance_id is None:
            member = self._dynamic_member(group, member_id, req)
        else:
            member = self._static_member(group, member_id, req, records)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=(req.server_assignor if req.server_assignor is not None
                             else member.server_assignor),
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex or None
                                    if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=req.client_id, client_host=req.client_host, classic=None,
        )
        group, reconciled = self.apply(group, member, updated, req.owned, records)
        self.schedule_session(group, member_id)
        if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
            if reconciled.member_epoch != member.member_epoch or member.state != MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance(group, reconciled)
        else:
            self.cancel_rebalance(group, member_id)
        full = (req.rebalance_timeout_ms != -1 and req.owned is not None and (
            req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send = joining or full or dict(reconciled.assigned) != dict(member.assigned)
        return HeartbeatResult(
            E.none, None, member_id, reconciled.member_epoch,
            self._config.heartbeat_interval_ms(group.group_id),
            dict(reconciled.assigned) if send else None,
        )

    def apply(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
              owned: OwnedPartitions, records: list[ConsumerRecord]) -> tuple[ConsumerGroup, ConsumerMember]:
        """Steps 1-3 for ``member`` (as the group has it) changed to ``updated``, written with
        ``records``; the group as written and the member reconciled. Raises KafkaError."""
        bump = group.group_epoch == 0
        if updated != member or updated.member_id not in group.members:
            records.append(member_record(group.group_id, updated))
            bump |= updated.subscribed_topic_names != member.subscribed_topic_names
        bump |= self._regexes(group, member, updated, records)
        members = {**group.members, updated.member_id: updated}
        replaced = group.static_members.get(updated.instance_id or "")
        if replaced is not None and replaced != updated.member_id:
            members.pop(replaced, None)
        subscribed = self._subscribed_names(group, members.values(), records)
        new_hash = metadata_hash(self._groups, subscribed)
        group_epoch = group.group_epoch
        if bump or new_hash != group.metadata_hash:
            group_epoch += 1
            records.append(GroupEpochRecord(group.group_id, group_epoch, new_hash))
            log.info("group %s: epoch %d", group.group_id, group_epoch)
        if group_epoch > group.target_epoch:
            target_epoch = group_epoch
            target = self._new_target(group, group_epoch, members, subscribed, replaced, records)
            mine = target.get(updated.member_id, {})
        else:
            target_epoch = group.target_epoch
            mine = group.target_of(updated.member_id, updated.instance_id)
        reconciled = updated
        if not updated.is_reconciled_to(target_epoch):
            reconciled = reconcile(updated, target_epoch, mine, group.partition_epoch, owned)
        if reconciled != updated:
            records.append(current_record(group.group_id, reconciled))
        converted = group.converted_from is not None
        self._groups.write(group.group_id, records, converting=group.converted_from)
        group = self._groups.groups[group.group_id]
        if converted:
            self.schedule_all(group)  # the classic members' sessions, now in this group
        return group, reconciled

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, req: ConsumerHeartbeat) -> ConsumerMember:
        member = group.members.get(member_id)
        if member is None:
            if req.member_epoch != 0:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
            log.info("group %s: member %s joins with the consumer protocol", group.group_id, member_id)
            return ConsumerMember(member_id)
        check_epoch(member, req)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, req: ConsumerHeartbeat,
                       records: list[ConsumerRecord]) -> ConsumerMember:
        existing = group.static_member(req.instance_id)
        if req.member_epoch == 0:
            if existing is None:
                return group.members.get(member_id) or ConsumerMember(member_id)
            if existing.member_epoch != STATIC_LEAVE_EPOCH and existing.classic is None:
                raise UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                    f"because the instance id is owned by {existing.member_id} member.")
            return self.replace_static(group, existing, member_id, records)
        if existing is None:
            raise UnknownMemberIdError(f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise FencedInstanceIdError(
                f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                f"{existing.member_id}.")
        check_epoch(existing, req)
        return existing

    def replace_static(self, group: ConsumerGroup, existing: ConsumerMember, member_id: str,
                       records: list[ConsumerRecord]) -> ConsumerMember:
        """Kafka's static member replacement: ``member_id`` takes ``existing``'s place (its
        target and partitions) at epoch 0; the records of the swap are added to ``records``."""
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        gid = group.group_id
        records += [CurrentAssignmentRecord(gid, existing.member_id, None),
                    TargetMemberRecord(gid, existing.member_id, None),
                    MemberRecord(gid, existing.member_id, None),
                    member_record(gid, new),
                    TargetMemberRecord(gid, member_id, dict(group.target_of(existing.member_id))),
                    current_record(gid, new)]
        self._cancel_timers(group, existing.member_id)
        log.info("group %s: static member %s (instance %s) replaces %s", gid, member_id,
                 existing.instance_id, existing.member_id)
        return new

    def _regexes(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember,
                 records: list[ConsumerRecord]) -> bool:
        """Resolve a newly subscribed regex, drop one nobody uses; whether the epoch must move."""
        if old.subscribed_topic_regex == new.subscribed_topic_regex:
            return False
        others = [m for mid, m in group.members.items() if mid not in (old.member_id, new.member_id)]
        still_used = group.subscribed_regexes(others)
        if old.subscribed_topic_regex and old.subscribed_topic_regex not in still_used \
                and old.subscribed_topic_regex in group.regexes:
            records.append(RegexRecord(group.group_id, old.subscribed_topic_regex, None))
        regex = new.subscribed_topic_regex
        if regex and regex not in group.regexes:
            try:
                re.compile(regex)
            except re.error as exc:
                raise InvalidRegularExpressionError(f"SubscribedTopicRegex {regex!r} is invalid: {exc}") from None
        return True

    def _subscribed_names(self, group: ConsumerGroup, members: Iterable[ConsumerMember],
                          records: list[ConsumerRecord]) -> set[str]:
        """Every topic the members subscribe to; regexes (re)resolved when topics changed."""
        names: set[str] = set()
        version = self._groups.topics.version
        for m in members:
            names.update(m.subscribed_topic_names)
            regex = m.subscribed_topic_regex
            if not regex:
                continue
            resolved = group.regexes.get(regex)
            pending = next((r for r in records if isinstance(r, RegexRecord) and r.regex == regex
                            and r.topics is not None), None)
            if pending is not None:
                names.update(pending.topics or ())
                continue
            if resolved is None or resolved.version != version:
                pattern = re.compile(regex)
                topics = tuple(sorted(t for t in self._groups.topics.names()
                                      if t != OFFSETS_TOPIC and pattern.fullmatch(t)))
                if resolved is None or set(topics) != resolved.topics or resolved.version != version:
                    records.append(RegexRecord(group.group_id, regex, topics, version, self._timer.now_ms()))
                names.update(topics)
            else:
                names.update(resolved.topics)
        return names

    def _new_target(self, group: ConsumerGroup, epoch: int, members: Mapping[str, ConsumerMember],
                    subscribed: set[str], replaced: str | None,
                    records: list[ConsumerRecord]) -> Mapping[str, Assignment]:
        """A new target assignment for ``epoch``; records for the members whose target changed."""
        topics = self._groups.topics
        partitions: dict[uuid.UUID, int] = {}
        ids: dict[str, uuid.UUID] = {}
        for name in subscribed:
            found = topics.by_name(name)
            if found is not None:
                ids[name], partitions[found[0]] = found[0], found[1]
        regex_topics = {r.regex: r.topics or () for r in records if isinstance(r, RegexRecord)}
        specs = []
        for m in members.values():
            names = set(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                resolved = group.regexes.get(m.subscribed_topic_regex)
                names.update(regex_topics.get(m.subscribed_topic_regex,
                                              resolved.topics if resolved else ()))
            specs.append(MemberSpec(m.member_id, m.instance_id,
                                    frozenset(ids[n] for n in names if n in ids)))
        specs.sort(key=lambda s: s.member_id)
        current = {mid: group.target_of(mid) for mid in members}
        for m in members.values():  # a replaced static member hands its target to the newcomer
            if replaced is not None and m.instance_id is not None and m.member_id not in group.target:
                current[m.member_id] = group.target_of(replaced)
        name = self._assignor(members)
        target = ASSIGNORS[name](specs, partitions, current)
        for mid in members:
            new = target.get(mid, {})
            if dict(new) != dict(current.get(mid, {})) or mid not in group.target:
                records.append(TargetMemberRecord(group.group_id, mid, new))
        records.append(TargetEpochRecord(group.group_id, epoch))
        log.info("group %s: target assignment for epoch %d by %r (%d member(s), %d partition(s))",
                 group.group_id, epoch, name, len(members), sum(partitions.values()))
        return target

    def _assignor(self, members: Mapping[str, ConsumerMember]) -> str:
        """The assignor most members name, else the first of ``group.consumer.assignors``."""
        counts: dict[str, int] = {}
        for m in members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if counts:
            return max(sorted(counts), key=lambda n: counts[n])
        return self._config.consumer_assignors[0]

    # ------------------------------------------------------------------ leaving, fencing

    def _leave(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        """Epoch -1: the member leaves; -2: a static member leaves for a while."""
        group = self._groups.get(req.group_id)
        if group is None:
            raise GroupIdNotFoundError(f"consumer group {req.group_id} not found")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {req.member_id} is not a member of group {req.group_id}.")
            self.fence(group, member, "it left the group")
            return HeartbeatResult(E.none, None, req.member_id, req.member_epoch)
        member = group.static_member(req.instance_id)
        if member is None:
            raise UnknownMemberIdError(f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise FencedInstanceIdError(
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member "
                f"{member.member_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            away = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
            self._groups.write(group.group_id, [current_record(group.group_id, away)])
            self.cancel_rebalance(group, member.member_id)
            log.info("group %s: static member %s (instance %s) left for now", group.group_id,
                     member.member_id, req.instance_id)
            return HeartbeatResult(E.none, None, member.member_id, STATIC_LEAVE_EPOCH)
        self.fence(group, member, "it left the group")
        return HeartbeatResult(E.none, None, req.member_id, req.member_epoch)

    def fence(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        """Remove ``member`` (tombstones) and bump the group epoch; raises KafkaError on a failed write.

        When only classic members would be left, :attr:`downgrade` may turn the group
        into a classic one instead (Kafka's online downgrade)."""
        gid, mid = group.group_id, member.member_id
        if self.downgrade is not None and self.downgrade(group, member, reason):
            self._cancel_timers(group, mid)
            return
        records: list[ConsumerRecord] = [CurrentAssignmentRecord(gid, mid, None),
                                         TargetMemberRecord(gid, mid, None), MemberRecord(gid, mid, None)]
        rest = [m for m in group.members.values() if m.member_id != mid]
        regex = member.subscribed_topic_regex
        if regex and regex not in group.subscribed_regexes(rest) and regex in group.regexes:
            records.append(RegexRecord(gid, regex, None))
        names: set[str] = set()
        for m in rest:
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex and m.subscribed_topic_regex in group.regexes:
                names.update(group.regexes[m.subscribed_topic_regex].topics)
        records.append(GroupEpochRecord(gid, group.group_epoch + 1, metadata_hash(self._groups, names)))
        self._groups.write(gid, records)
        self._cancel_timers(group, mid)
        log.info("group %s: member %s removed because %s (epoch %d)", gid, mid, reason, group.group_epoch)

    def _fence_quietly(self, group_id: str, member_id: str, epoch: int | None, reason: str) -> None:
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None or (epoch is not None and member.member_epoch != epoch):
            return
        try:
            self.fence(group, member, reason)
        except KafkaError as exc:
            log.warning("group %s: could not fence member %s: %s", group_id, member_id, exc)
            self.schedule_session(group, member_id)  # try again one session later

    # ------------------------------------------------------------------ timers

    def schedule_all(self, group: ConsumerGroup) -> None:
        """Sessions (and revocation deadlines) of every member, as after a load."""
        for member in group.members.values():
            self.schedule_session(group, member.member_id)
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance(group, member)

    def schedule_session(self, group: ConsumerGroup, member_id: str) -> None:
        """The member's session now ends its session timeout from now (a classic member's own)."""
        handles = group.timers.setdefault(member_id, [None, None])
        cancel(handles[0])
        gid = group.group_id
        member = group.members.get(member_id)
        timeout = self._config.session_timeout_ms(gid)
        if member is not None and member.classic is not None:
            timeout = member.classic.session_timeout_ms
        handles[0] = self._timer.call_later(
            timeout, lambda: self._fence_quietly(gid, member_id, None, "its session expired"))


    def _schedule_rebalance(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        handles = group.timers.setdefault(member.member_id, [None, None])
        cancel(handles[1])
        gid, mid, epoch = group.group_id, member.member_id, member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 300_000
        handles[1] = self._timer.call_later(
            timeout, lambda: self._fence_quietly(
                gid, mid, epoch, f"it did not revoke its partitions within {timeout} ms"))

    def schedule_rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member told to rejoin (REBALANCE_IN_PROGRESS) is fenced unless it rejoins
        within its rebalance timeout (Kafka's consumer group join timeout); kept if running."""
        handles = group.timers.setdefault(member.member_id, [None, None])
        if handles[1] is None:
            self._schedule_rebalance(group, member)

    def cancel_rebalance(self, group: ConsumerGroup, member_id: str) -> None:
        handles = group.timers.get(member_id)
        if handles is not None:
            cancel(handles[1])
            handles[1] = None


    @staticmethod
    def _cancel_timers(group: ConsumerGroup, member_id: str) -> None:
        for handle in group.timers.pop(member_id, ()):
            cancel(handle)
