"""The group coordinator: Kafka's classic rebalance protocol, sans I/O.

One :class:`GroupCoordinator` owns every group of this broker (single node: it
coordinates all of them). It follows Kafka's ``GroupCoordinator`` closely:

* JoinGroup puts the group in PreparingRebalance and parks each member's answer
  (a callback) until every known member has rejoined or the rebalance timeout
  passes; then the generation is bumped, a protocol is chosen among the
  members' assignors, members that did not rejoin are dropped, and everybody
  gets an answer, the leader with the member list (CompletingRebalance).
* SyncGroup parks followers until the leader brings the assignment, which is
  persisted before the group becomes Stable.
* A first join without a member id gets MEMBER_ID_REQUIRED and a fresh id
  (JoinGroup v4+); a static member (``group.instance.id``) that comes back
  takes over its old member id's place and assignment without a rebalance,
  and the old id is fenced (FENCED_INSTANCE_ID).
* Sessions: every heartbeat (and join/sync/commit) pushes a member's deadline;
  a member past its session timeout is removed and the group rebalances.
  The first rebalance of an empty group waits ``group.initial.rebalance.delay.ms``
  for more members (extended while members keep arriving, up to the rebalance
  timeout).
* Offsets and group metadata are written through an :class:`OffsetLog` in
  Kafka's ``__consumer_offsets`` format (:mod:`service.groups.records`) before
  they take effect in memory, and :meth:`GroupCoordinator.load` rebuilds every
  group from that log at start.

Nothing here does I/O itself: time and timers come from a :class:`Timer`, the
log is an :class:`OffsetLog`; both are swapped for fakes in the unit tests.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from local_tier.errors import ErrorCode, KafkaError, RecordBatchTooLargeError, RecordTooLargeError
from service.groups.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
)
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

__all__ = [
    "GroupConfig",
    "GroupCoordinator",
    "GroupSummary",
    "JoinRequest",
    "OffsetLog",
    "SyncRequest",
    "Timer",
]

log = logging.getLogger("strata.groups")

E = ErrorCode
#: Longest group id accepted (Kafka has no limit; an id must fit a record key).
MAX_GROUP_ID_LENGTH = 1024


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    """Wall-clock time and one-shot callbacks (asyncio's ``call_later`` in the broker)."""

    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class OffsetLog(Protocol):
    """The ``__consumer_offsets`` topic, as the coordinator needs it."""

    def ensure(self) -> int:
        """Create the topic when missing; its partition count."""
        ...

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append ``(key, value)`` records (value None: tombstone) durably, or raise KafkaError."""
        ...

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every record of every partition in offset order (nothing if the topic is missing)."""
        ...


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = False  # JoinGroup v9+


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    members: tuple[MemberSummary, ...]


class GroupCoordinator:
    def __init__(self, log_: OffsetLog, timer: Timer, config: GroupConfig | None = None) -> None:
        self._log = log_
        self._timer = timer
        self.config = config or GroupConfig()
        self._groups: dict[str, GroupMetadata] = {}
        self._partitions: int | None = None
        self._expiry_timer: Cancellable | None = None

    # ================================================================== lifecycle

    def load(self) -> None:
        """Rebuild groups and committed offsets from the log; start the expiry schedule."""
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        metadata: dict[str, GroupMetadataValue] = {}
        count = 0
        for raw_key, raw_value in self._log.replay():
            count += 1
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
                    metadata.pop(key.group, None)
                    offsets.pop(key.group, None)
                else:
                    metadata[key.group] = decode_group_value(raw_value)
            except ValueError as exc:
                log.warning("skipping an unreadable __consumer_offsets record: %s", exc)
        now = self._timer.now_ms()
        for group_id in set(offsets) | set(metadata):
            group = GroupMetadata(group_id, current_state_timestamp_ms=now)
            value = metadata.get(group_id)
            if value is not None:
                self._restore(group, value, now)
            group.offsets = offsets.get(group_id, {})
            if value is None and not group.offsets:
                continue
            self._groups[group_id] = group
        if count:
            log.info("loaded %d group(s) from %d __consumer_offsets record(s)", len(self._groups), count)
        self._schedule_expiry()

    def _restore(self, group: GroupMetadata, value: GroupMetadataValue, now: int) -> None:
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        if value.current_state_timestamp >= 0:
            group.current_state_timestamp_ms = value.current_state_timestamp
        for m in value.members:
            member = MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout, m.session_timeout, value.protocol_type,
                [(value.protocol or "", m.subscription)], assignment=m.assignment,
            )
            group.add(member)
            self._schedule_heartbeat(group, member, m.session_timeout)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        if group.members:
            group.state = GroupState.STABLE

    def shutdown(self) -> None:
        """Cancel every timer; parked join/sync answers are dropped with the connections."""
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        for group in self._groups.values():
            for member in group.members.values():
                _cancel(member.heartbeat_timer)
            for handle in group.pending_members.values():
                _cancel(handle)
            _cancel(group.join_timer)

    def ensure_offsets_topic(self) -> int:
        if self._partitions is None:
            self._partitions = self._log.ensure()
        return self._partitions

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group (tests and the admin API read it; do not mutate)."""
        return self._groups.get(group_id)

    # ================================================================== validation

    @staticmethod
    def _valid_group_id(group_id: str | None, *, allow_empty: bool) -> bool:
        """Kafka allows the empty id for offset commit/fetch and describe/delete only."""
        if group_id is None or len(group_id) > MAX_GROUP_ID_LENGTH:
            return False
        return allow_empty or group_id != ""

    @staticmethod
    def _validate_current_member(
        group: GroupMetadata, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if instance_id is not None:
            if instance_id not in group.static_members:
                return E.unknown_member_id
            if group.static_member_fenced(instance_id, member_id):
                return E.fenced_instance_id
            return None
        if member_id not in group.members:
            return E.unknown_member_id
        return None

    # ================================================================== JoinGroup

    def join_group(self, req: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """Answer through ``respond``, now or once the rebalance completes."""

        def fail(code: ErrorCode) -> None:
            respond(JoinResult(code, req.member_id))

        if not self._valid_group_id(req.group_id, allow_empty=False):
            return fail(E.invalid_group_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.invalid_session_timeout)
        if not req.protocol_type or not req.protocols:
            return fail(E.inconsistent_group_protocol)
        known = req.member_id != ""
        group = self._groups.get(req.group_id)
        if group is None:
            if known:
                return fail(E.unknown_member_id)
            group = self._groups[req.group_id] = GroupMetadata(
                req.group_id, current_state_timestamp_ms=self._timer.now_ms()
            )
        if group.is_state(GroupState.DEAD):
            return fail(E.coordinator_not_available)
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            return fail(E.inconsistent_group_protocol)
        if known:
            self._join_known(group, req, respond)
        else:
            self._join_unknown(group, req, respond)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _join_unknown(
        self, group: GroupMetadata, req: JoinRequest, respond: Callable[[JoinResult], None]
    ) -> None:
        new_id = f"{req.client_id}-{uuid.uuid4()}"
        instance = req.group_instance_id
        if instance is not None:
            old_id = group.static_members.get(instance)
            if old_id is not None:
                self._replace_static_member(group, old_id, new_id, req, respond)
            else:
                self._add_member_and_rebalance(group, new_id, req, respond)
        elif req.require_known_member_id:
            session = req.session_timeout_ms
            group.pending_members[new_id] = self._timer.call_later(
                session, lambda: self._expire_pending(group, new_id)
            )
            respond(JoinResult(E.member_id_required, new_id))
        else:
            self._add_member_and_rebalance(group, new_id, req, respond)

    def _join_known(
        self, group: GroupMetadata, req: JoinRequest, respond: Callable[[JoinResult], None]
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            _cancel(group.pending_members.pop(member_id))
            self._add_member_and_rebalance(group, member_id, req, respond)
            return
        error = self._validate_current_member(group, member_id, req.group_instance_id)
        if error is not None:
            respond(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # A retried join: the answer it missed.
                respond(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, respond)
            else:
                respond(self._join_result(group, member))
        else:
            respond(JoinResult(E.unknown_member_id, member_id))

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        leader = group.is_leader(member.member_id)
        return JoinResult(
            E.none,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if leader else (),
        )

    def _add_member_and_rebalance(
        self,
        group: GroupMetadata,
        member_id: str,
        req: JoinRequest,
        respond: Callable[[JoinResult], None],
    ) -> None:
        member = MemberMetadata(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            is_new=True,
            join_callback=respond,
        )
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        req: JoinRequest,
        respond: Callable[[JoinResult], None],
    ) -> None:
        if member.join_callback is not None:  # a duplicate join: the older one gives way
            member.join_callback(JoinResult(E.rebalance_in_progress, member.member_id))
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.join_callback = respond
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _replace_static_member(
        self,
        group: GroupMetadata,
        old_id: str,
        new_id: str,
        req: JoinRequest,
        respond: Callable[[JoinResult], None],
    ) -> None:
        """KIP-345: the returning static member takes over ``old_id``'s place and assignment."""
        assert req.group_instance_id is not None
        previous_leader = group.leader_id or ""
        old = group.members[old_id]
        _cancel(old.heartbeat_timer)
        if old.join_callback is not None:
            old.join_callback(JoinResult(E.fenced_instance_id, old_id))
            old.join_callback = None
        if old.sync_callback is not None:
            old.sync_callback(SyncResult(E.fenced_instance_id))
            old.sync_callback = None
        old_protocols = list(old.protocols)
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_state(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                member.join_callback = respond
                self._maybe_prepare_rebalance(group, f"static member {new_id} changed protocols")
                return
            try:
                self._store_group(group)
            except KafkaError as exc:
                # Undo: the old id keeps its place, the newcomer gets the error.
                group.replace_static_member(req.group_instance_id, new_id, old_id)
                member.protocols = old_protocols
                respond(JoinResult(_storage_error(exc), ""))
                return
            leader = group.is_leader(new_id) and req.supports_skip_assignment
            respond(
                JoinResult(
                    E.none,
                    new_id,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    new_id if leader else previous_leader,
                    group.current_member_metadata() if leader else (),
                    skip_assignment=leader,
                )
            )
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            member.join_callback = respond
            self._prepare_rebalance(group, f"static member {new_id} replaced {old_id} mid-rebalance")
        else:  # PreparingRebalance: wait with the others
            member.join_callback = respond

    # ================================================================== rebalance

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._propagate_assignment_error(group, E.rebalance_in_progress)
        initial = group.is_state(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._timer.now_ms())
        log.info(
            "group %s: preparing to rebalance (generation %d): %s",
            group.group_id, group.generation_id, reason,
        )
        _cancel(group.join_timer)
        timeout = group.max_rebalance_timeout_ms()
        if initial:
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            group.initial_join_pending = True
            group.new_member_added = False
            self._schedule_initial_join(group, delay, max(timeout - delay, 0))
        else:
            group.join_timer = self._timer.call_later(timeout, lambda: self._complete_join(group))

    def _schedule_initial_join(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        def fire() -> None:
            if group.new_member_added and remaining > 0:
                group.new_member_added = False
                step = min(self.config.initial_rebalance_delay_ms, remaining)
                self._schedule_initial_join(group, step, remaining - step)
            else:
                self._complete_join(group)

        group.join_timer = self._timer.call_later(delay, fire)

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        if (
            group.is_state(GroupState.PREPARING_REBALANCE)
            and not group.initial_join_pending
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        _cancel(group.join_timer)
        group.join_timer = None
        group.initial_join_pending = False
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        for member in group.not_yet_rejoined():
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            self._forget_member(group, member)
        now = self._timer.now_ms()
        group.init_next_generation(now)
        if group.is_state(GroupState.EMPTY):
            log.info("group %s: generation %d has no members", group.group_id, group.generation_id)
            self._try_store_group(group)
            return
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id, group.generation_id, len(group.members), group.protocol_name,
        )
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            if callback is not None:
                callback(self._join_result(group, member))

    def _propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(SyncResult(error))

    def _forget_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        _cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        log.info("group %s: removing member %s: %s", group.group_id, member.member_id, reason)
        join, member.join_callback = member.join_callback, None
        sync, member.sync_callback = member.sync_callback, None
        self._forget_member(group, member)
        if join is not None:
            join(JoinResult(E.unknown_member_id, member.member_id))
        if sync is not None:
            sync(SyncResult(E.unknown_member_id))
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # ================================================================== sessions

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        _cancel(member.heartbeat_timer)
        now = self._timer.now_ms()
        member.last_heartbeat_ms = now
        member.heartbeat_timer = self._timer.call_later(
            timeout_ms, lambda: self._expire_heartbeat(group, member)
        )

    def _expire_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member or group.is_state(GroupState.DEAD):
            return
        if member.awaiting_sync or (member.awaiting_join and not member.is_new):
            # Kept alive by its parked request; check again one session later.
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return
        self._remove_member_and_update_group(group, member, "session timeout expired")

    def _expire_pending(self, group: GroupMetadata, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            log.info("group %s: pending member %s never joined", group.group_id, member_id)
            self._maybe_complete_join(group)

    # ================================================================== SyncGroup

    def sync_group(self, req: SyncRequest, respond: Callable[[SyncResult], None]) -> None:
        if not self._valid_group_id(req.group_id, allow_empty=False):
            return respond(SyncResult(E.invalid_group_id))
        group = self._groups.get(req.group_id)
        if group is None:
            return respond(SyncResult(E.unknown_member_id))
        if group.is_state(GroupState.DEAD):
            return respond(SyncResult(E.coordinator_not_available))
        error = self._validate_current_member(group, req.member_id, req.group_instance_id)
        if error is not None:
            return respond(SyncResult(error))
        if req.generation_id != group.generation_id:
            return respond(SyncResult(E.illegal_generation))
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return respond(SyncResult(E.inconsistent_group_protocol))
        member = group.members[req.member_id]
        if group.is_state(GroupState.EMPTY):
            return respond(SyncResult(E.unknown_member_id))
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return respond(SyncResult(E.rebalance_in_progress))
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_state(GroupState.STABLE):
            return respond(self._sync_result(group, member))
        # CompletingRebalance: park until the leader brings the assignment.
        if member.sync_callback is not None:
            member.sync_callback(SyncResult(E.rebalance_in_progress))
        member.sync_callback = respond
        if not group.is_leader(req.member_id):
            return
        for m in group.members.values():
            m.assignment = req.assignments.get(m.member_id, b"")
        try:
            self._store_group(group)
        except KafkaError as exc:
            self._propagate_assignment_error(group, _storage_error(exc))
            self._maybe_prepare_rebalance(group, "could not persist the assignment")
            return
        group.transition_to(GroupState.STABLE, self._timer.now_ms())
        log.info("group %s: generation %d is stable", group.group_id, group.generation_id)
        for m in group.members.values():
            callback, m.sync_callback = m.sync_callback, None
            if callback is not None:
                callback(self._sync_result(group, m))

    @staticmethod
    def _sync_result(group: GroupMetadata, member: MemberMetadata) -> SyncResult:
        return SyncResult(E.none, group.protocol_type, group.protocol_name, member.assignment)

    # ================================================================== Heartbeat, LeaveGroup

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if not self._valid_group_id(group_id, allow_empty=False):
            return E.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_state(GroupState.DEAD):
            return E.coordinator_not_available
        error = self._validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.illegal_generation
        member = group.members[member_id]
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per ``(member_id, group_instance_id)`` leaving)."""
        if not self._valid_group_id(group_id, allow_empty=False):
            return E.invalid_group_id, [E.invalid_group_id] * len(members)
        group = self._groups.get(group_id)
        if group is None:
            return E.none, [E.unknown_member_id] * len(members)
        if group.is_state(GroupState.DEAD):
            return E.coordinator_not_available, [E.coordinator_not_available] * len(members)
        results = []
        for member_id, instance_id in members:
            if instance_id is not None:
                holder = group.static_members.get(instance_id)
                if holder is None:
                    results.append(E.unknown_member_id)
                    continue
                if member_id and holder != member_id:
                    results.append(E.fenced_instance_id)
                    continue
                member_id = holder
            elif member_id in group.pending_members:
                _cancel(group.pending_members.pop(member_id))
                self._maybe_complete_join(group)
                results.append(E.none)
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append(E.unknown_member_id)
                continue
            self._remove_member_and_update_group(group, member, "left the group")
            results.append(E.none)
        return E.none, results

    # ================================================================== offsets

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
        topic_exists: Callable[[str], bool],
    ) -> dict[TopicPartition, ErrorCode]:
        """Store ``(offset, leader_epoch, metadata)`` per partition; an error code per partition."""

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        if not self._valid_group_id(group_id, allow_empty=True):
            return every(E.invalid_group_id)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return every(E.illegal_generation)
            group = GroupMetadata(group_id, current_state_timestamp_ms=self._timer.now_ms())
        error = self._validate_offset_commit(group, generation_id, member_id, instance_id)
        if error is None and group.is_state(GroupState.COMPLETING_REBALANCE):
            error = E.rebalance_in_progress
        if error is not None:
            return every(error)
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self._timer.now_ms()
        for tp, (offset, epoch, metadata) in offsets.items():
            if not topic_exists(tp[0]):
                results[tp] = E.unknown_topic_or_partition
            elif metadata is not None and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = E.offset_metadata_too_large
            else:
                accepted[tp] = OffsetAndMetadata(offset, epoch, metadata or "", now)
        if accepted:
            records = [
                (
                    encode_key(OffsetKey(group_id, tp[0], tp[1])),
                    encode_offset_value(
                        OffsetValue(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp)
                    ),
                )
                for tp, o in accepted.items()
            ]
            try:
                self._append(group_id, records)
            except KafkaError as exc:
                code = _storage_error(exc)
                results.update(dict.fromkeys(accepted, code))
                return results
            self._groups.setdefault(group_id, group)
            group.offsets.update(accepted)
            results.update(dict.fromkeys(accepted, E.none))
            member = group.members.get(member_id)
            if member is not None:
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
        return results

    def _validate_offset_commit(
        self, group: GroupMetadata, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if group.is_state(GroupState.DEAD):
            return E.coordinator_not_available
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._validate_current_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.illegal_generation
            return None
        if not group.is_state(GroupState.EMPTY):
            return E.unknown_member_id  # only members commit to a group that has members
        return None

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (None: nothing committed); ``partitions=None`` means all."""
        if not self._valid_group_id(group_id, allow_empty=True):
            return E.invalid_group_id, {}
        group = self._groups.get(group_id)
        stored = {} if group is None or group.is_state(GroupState.DEAD) else group.offsets
        if partitions is None:
            return E.none, dict(stored)
        return E.none, {tp: stored.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for topics the live group still subscribes to."""
        if not self._valid_group_id(group_id, allow_empty=False):
            return E.invalid_group_id, {}
        group = self._groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return E.group_id_not_found, {}
        if group.is_state(GroupState.EMPTY):
            subscribed: set[str] = set()
        elif group.protocol_type == "consumer":
            subscribed = group.subscribed_topics() or set()
        else:
            return E.non_empty_group, {}
        results: dict[TopicPartition, ErrorCode] = {}
        removable = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = E.group_subscribed_to_topic
            else:
                results[tp] = E.none
                if tp in group.offsets:
                    removable.append(tp)
        if removable:
            try:
                self._remove_offsets(group, removable)
            except KafkaError as exc:
                return _storage_error(exc), {}
        return E.none, results

    def _remove_offsets(self, group: GroupMetadata, partitions: Sequence[TopicPartition]) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in partitions
        ]
        self._append(group.group_id, records)
        for tp in partitions:
            group.offsets.pop(tp, None)

    # ================================================================== admin

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        dead = GroupSummary(group_id, GroupState.DEAD.value, "", "", -1, ())
        if not self._valid_group_id(group_id, allow_empty=True):
            return E.invalid_group_id, dead
        group = self._groups.get(group_id)
        if group is None:
            return E.none, dead
        stable = group.is_state(GroupState.STABLE)
        members = tuple(
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return E.none, GroupSummary(
            group_id,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            group.generation_id,
            members,
        )

    def committed_offsets(self) -> dict[str, dict[TopicPartition, int]]:
        """Committed offset of every partition of every group (for metrics and the admin API)."""
        return {
            g.group_id: {tp: om.offset for tp, om in g.offsets.items()}
            for g in self._groups.values()
            if g.offsets
        }

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every live group, optionally by state."""
        wanted = {s.lower() for s in states}
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if not g.is_state(GroupState.DEAD) and (not wanted or g.state.value.lower() in wanted)
        ]

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if not self._valid_group_id(group_id, allow_empty=True):
                results[group_id] = E.invalid_group_id
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_state(GroupState.DEAD):
                results[group_id] = E.group_id_not_found
            elif not group.is_state(GroupState.EMPTY):
                results[group_id] = E.non_empty_group
            else:
                try:
                    self._delete_group(group)
                    results[group_id] = E.none
                except KafkaError as exc:
                    results[group_id] = _storage_error(exc)
        return results

    def _delete_group(self, group: GroupMetadata) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in group.offsets
        ]
        records.append((encode_key(GroupMetadataKey(group.group_id)), None))
        self._append(group.group_id, records)
        group.transition_to(GroupState.DEAD, self._timer.now_ms())
        group.offsets.clear()
        _cancel(group.join_timer)
        for handle in group.pending_members.values():
            _cancel(handle)
        self._groups.pop(group.group_id, None)

    # ================================================================== expiry

    def _schedule_expiry(self) -> None:
        interval = min(self.config.offsets_retention_check_interval_ms, self.config.offsets_retention_ms)

        def run() -> None:
            try:
                self.expire_offsets()
            except Exception:  # the schedule must survive a failed pass
                log.exception("offset expiry failed")
            self._schedule_expiry()

        self._expiry_timer = self._timer.call_later(max(interval, 1000), run)

    def expire_offsets(self) -> int:
        """Kafka's ``cleanupGroupMetadata``: drop expired offsets and groups left with none."""
        now = self._timer.now_ms()
        retention = self.config.offsets_retention_ms
        removed = 0
        for group in list(self._groups.values()):
            if group.is_state(GroupState.EMPTY):
                if group.protocol_type is not None:
                    # Everything expires once the group has been empty for the retention.
                    expired = list(group.offsets) if group.current_state_timestamp_ms + retention <= now else []
                else:  # standalone consumer: per offset, from its commit
                    expired = [
                        tp for tp, o in group.offsets.items() if o.commit_timestamp + retention <= now
                    ]
            elif group.is_state(GroupState.STABLE) and (topics := group.subscribed_topics()) is not None:
                expired = [
                    tp
                    for tp, o in group.offsets.items()
                    if tp[0] not in topics and o.commit_timestamp + retention <= now
                ]
            else:
                expired = []
            try:
                if expired:
                    self._remove_offsets(group, expired)
                    removed += len(expired)
                if group.is_state(GroupState.EMPTY) and not group.offsets:
                    log.info("group %s: empty with no offsets left; removing it", group.group_id)
                    self._delete_group(group)
            except KafkaError as exc:
                log.warning("group %s: could not expire offsets: %s", group.group_id, exc)
        if removed:
            log.info("expired %d committed offset(s)", removed)
        return removed

    # ================================================================== persistence

    def _append(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        partitions = self.ensure_offsets_topic()
        self._log.append(partition_for(group_id, partitions), records)

    def _store_group(self, group: GroupMetadata) -> None:
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
        key = encode_key(GroupMetadataKey(group.group_id))
        self._append(group.group_id, [(key, encode_group_value(value))])

    def _try_store_group(self, group: GroupMetadata) -> None:
        try:
            self._store_group(group)
        except KafkaError as exc:
            log.warning("group %s: could not persist its metadata: %s", group.group_id, exc)


def _cancel(handle: Any) -> None:
    if handle is not None:
        handle.cancel()


def _storage_error(exc: KafkaError) -> ErrorCode:
    """Kafka's mapping of a failed ``__consumer_offsets`` append to what a client sees."""
    if isinstance(exc, (RecordTooLargeError, RecordBatchTooLargeError)):
        return E.invalid_commit_offset_size
    return E.coordinator_not_available
