"""Classic members inside consumer groups: Kafka 4's online migration between the protocols.

``group.consumer.migration.policy`` (``bidirectional``, Kafka 4's default;
``upgrade``, ``downgrade``, ``disabled``) lets a group change protocol while its
members run, one member at a time (a rolling upgrade of the consumers):

* **Upgrade**: a ConsumerGroupHeartbeat joining a classic group that has members
  (and uses the ``consumer`` protocol type) converts it, as Kafka's
  ``ConsumerGroup.fromClassicGroup``: each classic member becomes a member of the
  consumer group at the classic generation, its target and current assignment
  the partitions it was given last, ``Stable``, its session timeout and
  protocols kept as ``ClassicMemberMetadata`` in its member record; the group and
  target epochs are the generation. The classic metadata gets a tombstone in the
  same append; offsets stay. Parked JoinGroup/SyncGroup answers get
  REBALANCE_IN_PROGRESS. The joining member then moves the group epoch on as any
  new member does.
* **Classic members in a consumer group** keep speaking JoinGroup, SyncGroup,
  Heartbeat and LeaveGroup, answered from the consumer group's state (Kafka's
  ``classicGroup*ToConsumerGroup``): a JoinGroup updates the member from its
  embedded subscription and reconciles it with the partitions it says it owns
  (an eager client owns none when it rejoins), and answers at once with its
  member epoch as the generation and no leader (nobody runs a client-side
  assignor); SyncGroup hands out its assigned partitions in the embedded
  ``ConsumerProtocolAssignment``; Heartbeat answers REBALANCE_IN_PROGRESS when it
  must rejoin (its epoch is behind the target, it has partitions to revoke, or the
  partitions it waits for are free) and it is fenced unless it rejoins within its
  rebalance timeout; a generation that is not its member epoch is
  ILLEGAL_GENERATION, also for its OffsetCommit.
* **Downgrade**: when the last consumer-protocol member leaves (or is fenced) and
  classic members remain, the group becomes a classic group again, as Kafka's
  ``ClassicGroup.fromConsumerGroup``: generation = the group epoch, each member's
  assignment its target, one append holding the consumer group's tombstones and
  the classic metadata; then a rebalance starts, so the members rejoin.

With the policy ``disabled`` (or the direction not allowed) Kafka's errors stay:
GROUP_ID_NOT_FOUND for the heartbeat, INCONSISTENT_GROUP_PROTOCOL for the join,
and no downgrade. Not done, as documented in ADR 0015: a downgrade triggered by a
classic static member replacing the last consumer-protocol one, and Kafka's sync
timeout (a joined classic member that never syncs is fenced by its session).

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from common.errors import ErrorCode, KafkaError
from service.groups.consumer.embedded import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from service.groups.consumer.groups import ConsumerGroups, tombstones
from service.groups.consumer.heartbeat import Heartbeats, answer_code, metadata_hash
from service.groups.consumer.model import ConsumerGroup, current_record, member_record
from service.groups.consumer.reconcile import Assignment, ConsumerMember, MemberState
from service.groups.consumer.records import (
    ClassicMemberMetadata,
    ConsumerRecord,
    GroupEpochRecord,
    TargetEpochRecord,
    TargetMemberRecord,
)
from service.groups.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from service.groups.group import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    SyncResult,
)
from service.groups.rebalance import Rebalancer
from service.groups.requests import GroupConfig, JoinRequest, SyncRequest
from service.groups.seams import Timer
from service.groups.store import GroupStore

__all__ = ["ClassicMembers"]

log = logging.getLogger("strata.groups")
E = ErrorCode
Named = tuple[tuple[str, tuple[int, ...]], ...]


class ClassicMembers:
    """The classic side of mixed groups; hooks itself into ``groups`` (upgrade) and
    ``heartbeats`` (downgrade)."""

    def __init__(self, groups: ConsumerGroups, heartbeats: Heartbeats, store: GroupStore,
                 rebalance: Rebalancer, timer: Timer, config: GroupConfig) -> None:
        self._groups = groups
        self._heartbeats = heartbeats
        self._store = store
        self._rebalance = rebalance
        self._timer = timer
        self._config = config
        groups.upgrade = self.upgrade
        heartbeats.downgrade = self.downgrade

    def _allows(self, direction: str) -> bool:
        return self._config.consumer_migration_policy in (direction, "bidirectional")

    # ================================================================== upgrade

    def upgrade(self, classic: GroupMetadata, records: list[ConsumerRecord]) -> ConsumerGroup:
        """The consumer group ``classic`` becomes (not registered; its records added to
        ``records``); GroupIdNotFoundError when it may not, with Kafka's reasons."""
        gid = classic.group_id
        why = f"Cannot upgrade classic group {gid} to consumer group"
        if not self._allows("upgrade"):
            raise GroupIdNotFoundError(f"{why} because online upgrade is disabled.")
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise GroupIdNotFoundError(f"{why} because the group does not use the consumer embedded protocol.")
        if len(classic.members) > self._config.consumer_max_size:
            raise GroupIdNotFoundError(f"{why} because the group size exceeds the consumer group maximum size.")
        epoch = classic.generation_id
        members = []
        for m in classic.members.values():
            try:
                named, user_data = decode_assignment(m.assignment)
                sub = decode_subscription(m.metadata(classic.protocol_name) or m.protocols[0][1])
            except (ValueError, IndexError, UnicodeDecodeError):
                raise GroupIdNotFoundError(f"{why} because the embedded consumer protocol is malformed.") from None
            if user_data:
                raise GroupIdNotFoundError(f"{why} because an unsupported custom assignor is in use.")
            members.append(ConsumerMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(sub.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=epoch, previous_member_epoch=epoch,
                assigned=self._ids(named), classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
            ))
        for m in classic.members.values():  # parked requests: rejoin the group it has become
            join, sync = m.join_callback, m.sync_callback
            m.join_callback = m.sync_callback = None
            if join is not None:
                join(JoinResult(E.rebalance_in_progress, m.member_id))
            if sync is not None:
                sync(SyncResult(E.rebalance_in_progress))
        names = {t for m in members for t in m.subscribed_topic_names}
        converted: list[ConsumerRecord] = [member_record(gid, m) for m in members]
        converted.append(GroupEpochRecord(gid, epoch, metadata_hash(self._groups, names)))
        converted += [TargetMemberRecord(gid, m.member_id, dict(m.assigned)) for m in members]
        converted.append(TargetEpochRecord(gid, epoch))
        converted += [current_record(gid, m) for m in members]
        now = self._timer.now_ms()
        group = ConsumerGroup(gid, empty_since_ms=now)
        for record in converted:
            group.replay(record, now)
        group.converted_from = classic
        records.extend(converted)
        log.info("group %s: converting the classic group (generation %d, %d member(s)) to a consumer group",
                 gid, epoch, len(members))
        return group

    # ================================================================== the classic requests

    def join(self, group: ConsumerGroup, req: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """JoinGroup of a classic member to ``group`` (which has members)."""
        try:
            respond(self._join(group, req))
        except KafkaError as exc:
            respond(JoinResult(answer_code(exc), req.member_id))

    def _join(self, group: ConsumerGroup, req: JoinRequest) -> JoinResult:
        if self._config.consumer_migration_policy == "disabled":
            raise InconsistentGroupProtocolError(
                f"Cannot join the consumer group {group.group_id} with the classic protocol because the "
                "group migration is disabled.")
        cfg = self._config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult(E.invalid_session_timeout, req.member_id)
        member_id = req.member_id or str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= cfg.consumer_max_size:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {cfg.consumer_max_size} members.")
        if not self._supports(group, req):
            raise InconsistentGroupProtocolError(f"Member {member_id}'s protocols are not supported.")
        if not req.member_id and req.group_instance_id is None and req.require_known_member_id:
            return JoinResult(E.member_id_required, member_id)
        records: list[ConsumerRecord] = []
        member = self._member(group, member_id, req, records)
        try:
            sub = decode_subscription(req.protocols[0][1])
        except (ValueError, UnicodeDecodeError):
            raise InconsistentGroupProtocolError(
                "Malformed embedded consumer protocol in subscription deserialization.") from None
        updated = replace(
            member, instance_id=req.group_instance_id,
            rack_id=sub.rack_id if sub.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(sub.topics))), subscribed_topic_regex=None,
            client_id=req.client_id, client_host=req.client_host,
            classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)),
        )
        group, reconciled = self._heartbeats.apply(group, member, updated, self._ids(sub.owned), records)
        self._heartbeats.cancel_rebalance(group, member_id)  # it rejoined
        self._heartbeats.schedule_session(group, member_id)
        if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
            self._heartbeats.schedule_rejoin(group, reconciled)
        log.info("group %s: classic member %s joined at epoch %d", group.group_id, member_id,
                 reconciled.member_epoch)
        return JoinResult(E.none, member_id, reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE,
                          req.protocols[0][0], "", ())

    def _supports(self, group: ConsumerGroup, req: JoinRequest) -> bool:
        """Kafka's ``supportsClassicProtocols``: a protocol every classic member offers."""
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
            return False
        classic = group.classic_members()
        return any(all(name in {n for n, _ in m.classic.protocols} for m in classic if m.classic)
                   for name, _ in req.protocols)

    def _member(self, group: ConsumerGroup, member_id: str, req: JoinRequest,
                records: list[ConsumerRecord]) -> ConsumerMember:
        """The member joining: new, known, or a static member taking its instance's place."""
        existing = group.static_member(req.group_instance_id)
        if existing is None or existing.member_id == member_id:
            return group.members.get(member_id) or ConsumerMember(member_id)
        if req.member_id:
            raise FencedInstanceIdError(
                f"Static member {member_id} with instance id {req.group_instance_id} was fenced by member "
                f"{existing.member_id}.")
        return self._heartbeats.replace_static(group, existing, member_id, records)

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's ``validateConsumerGroupMember`` and ``throwIfMemberDoesNotUseClassicProtocol``."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                raise FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} was fenced.")
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        if member.classic is None:
            raise UnknownMemberIdError(f"Member {member_id} does not use the classic protocol.")
        return member

    def sync(self, group: ConsumerGroup, req: SyncRequest, respond: Callable[[SyncResult], None]) -> None:
        try:
            member = self._classic_member(group, req.member_id, req.group_instance_id)
            assert member.classic is not None
            if req.generation_id != member.member_epoch:
                raise IllegalGenerationError(
                    f"The request generation id {req.generation_id} is not equal to the member epoch "
                    f"{member.member_epoch} of member {member.member_id}.")
            name = member.classic.protocols[0][0]
            if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    req.protocol_name is not None and req.protocol_name != name):
                raise InconsistentGroupProtocolError(f"The protocol of member {member.member_id} is {name}.")
            if group.target_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
                self._heartbeats.schedule_rejoin(group, member)
                raise RebalanceInProgressError(f"A new rebalance is triggered in group {group.group_id}.")
        except KafkaError as exc:
            return respond(SyncResult(answer_code(exc)))
        self._heartbeats.schedule_session(group, member.member_id)
        version = _version(member.classic.protocols[0][1])
        respond(SyncResult(E.none, req.protocol_type, req.protocol_name,
                           encode_assignment(self._names(member.assigned), version)))

    def heartbeat(self, group: ConsumerGroup, generation_id: int, member_id: str,
                  instance_id: str | None) -> ErrorCode:
        try:
            member = self._classic_member(group, member_id, instance_id)
        except KafkaError as exc:
            return exc.code
        if generation_id != member.member_epoch:
            return E.illegal_generation
        self._heartbeats.schedule_session(group, member.member_id)
        if (member.member_epoch < group.target_epoch or member.state == MemberState.UNREVOKED_PARTITIONS
                or (member.state == MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))):
            self._heartbeats.schedule_rejoin(group, member)
            return E.rebalance_in_progress
        return E.none

    def leave(self, group: ConsumerGroup, members: Sequence[tuple[str, str | None]]
              ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup from ``group``: each member named is fenced (any member, as Kafka)."""
        gid = group.group_id
        results = []
        for member_id, instance_id in members:
            current = self._groups.get(gid)
            if current is None:  # downgraded by an earlier leaver: a classic group now
                results.append(self._leave_classic(gid, member_id, instance_id))
                continue
            member = current.static_member(instance_id) if instance_id is not None else current.members.get(member_id)
            if member is None:
                results.append(E.unknown_member_id)
                continue
            if instance_id is not None and member_id and member.member_id != member_id:
                results.append(E.fenced_instance_id)
                continue
            try:
                self._heartbeats.fence(current, member, "it left the group (LeaveGroup)")
                results.append(E.none)
            except KafkaError as exc:
                results.append(answer_code(exc))
        return E.none, results

    def _leave_classic(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        holder = self._store.get(group_id)
        if holder is None:
            return E.unknown_member_id
        member_id = holder.static_members.get(instance_id, member_id) if instance_id is not None else member_id
        member = holder.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        self._rebalance.remove_member_and_update_group(holder, member, "left the group")
        return E.none

    # ================================================================== downgrade

    def downgrade(self, group: ConsumerGroup, leaving: ConsumerMember, reason: str) -> bool:
        """Kafka's ``convertToClassicGroup`` when ``leaving`` goes and only classic members stay;
        False (nothing done) when that is not the case or the policy forbids it."""
        rest = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if not rest or any(m.classic is None for m in rest):
            return False
        gid = group.group_id
        if not self._allows("downgrade"):
            log.info("group %s: not downgraded to a classic group: the online downgrade is disabled", gid)
            return False
        now = self._timer.now_ms()
        classic = GroupMetadata(gid, GroupState.STABLE, group.group_epoch, CONSUMER_PROTOCOL_TYPE,
                                current_state_timestamp_ms=now)
        for m in rest:
            assert m.classic is not None
            classic.add(MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host,
                                       m.rebalance_timeout_ms, m.classic.session_timeout_ms,
                                       CONSUMER_PROTOCOL_TYPE, list(m.classic.protocols)))
        classic.protocol_name = classic.select_protocol()
        for cm in classic.members.values():
            cm.assignment = encode_assignment(self._names(group.target_of(cm.member_id)),
                                              _version(cm.metadata(classic.protocol_name)))
        self._groups.write(gid, tombstones(group), then=[GroupStore.metadata_record(classic)])
        holder = self._store.get(gid)
        if holder is None:
            holder = self._store.groups[gid] = GroupMetadata(gid)
        holder.consumer = None
        for name in ("generation_id", "protocol_type", "protocol_name", "leader_id", "members", "static_members"):
            setattr(holder, name, getattr(classic, name))
        holder.state, holder.current_state_timestamp_ms = GroupState.STABLE, now
        for member in holder.members.values():
            self._rebalance.schedule_heartbeat(holder, member, member.session_timeout_ms)
        log.info("group %s: converted to a classic group (generation %d, %d member(s)) as %s left: %s",
                 gid, holder.generation_id, len(holder.members), leaving.member_id, reason)
        self._rebalance.prepare_rebalance(holder, f"downgrade of group {gid} from consumer to classic")
        return True

    # ================================================================== topics

    def _ids(self, named: Iterable[tuple[str, Iterable[int]]]) -> dict[uuid.UUID, tuple[int, ...]]:
        """Partitions by topic name as an assignment by topic id (unknown topics left out)."""
        out: dict[uuid.UUID, tuple[int, ...]] = {}
        for topic, parts in named:
            found = self._groups.topics.by_name(topic)
            if found is not None:
                out[found[0]] = tuple(sorted(set(out.get(found[0], ())) | set(parts)))
        return out

    def _names(self, assignment: Assignment) -> Named:
        return tuple((name, tuple(parts)) for _, name, parts in self._groups.named(assignment))


def _version(metadata: bytes) -> int:
    """The version of an embedded subscription (the assignment answers in the same)."""
    return int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
