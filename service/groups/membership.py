"""The member requests of the classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

:class:`Membership` validates each request against the group's state and
answers it through the ``respond`` callback it is given, at once or, for a
JoinGroup during a rebalance and a SyncGroup waiting for the leader's
assignment, when :mod:`service.groups.rebalance` completes the step:

* A first join without a member id gets MEMBER_ID_REQUIRED and a fresh id
  (JoinGroup v4+), which must come back within the session timeout.
* A static member (``group.instance.id``, KIP-345) that comes back takes over
  its old member id's place and assignment without a rebalance, and the old id
  is fenced (FENCED_INSTANCE_ID).
* SyncGroup parks followers until the leader brings the assignment, which is
  persisted (:class:`~service.groups.store.GroupStore`) before the group
  becomes Stable; a failed write sends everyone back to rejoin.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from common.errors import ErrorCode, KafkaError
from service.groups.errors import storage_error
from service.groups.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    SyncResult,
    valid_group_id,
)
from service.groups.rebalance import Rebalancer, join_result
from service.groups.requests import GroupConfig, JoinRequest, SyncRequest
from service.groups.seams import Timer, cancel
from service.groups.store import GroupStore

__all__ = ["Membership"]

log = logging.getLogger("strata.groups")

E = ErrorCode


class Membership:
    def __init__(
        self, store: GroupStore, rebalance: Rebalancer, timer: Timer, config: GroupConfig
    ) -> None:
        self._store = store
        self._rebalance = rebalance
        self._timer = timer
        self._config = config

    # ------------------------------------------------------------------ JoinGroup

    def join_group(self, req: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """Answer through ``respond``, now or once the rebalance completes."""

        def fail(code: ErrorCode) -> None:
            respond(JoinResult(code, req.member_id))

        if not valid_group_id(req.group_id, allow_empty=False):
            return fail(E.invalid_group_id)
        cfg = self._config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.invalid_session_timeout)
        if not req.protocol_type or not req.protocols:
            return fail(E.inconsistent_group_protocol)
        known = req.member_id != ""
        group = self._store.get(req.group_id)
        if group is None:
            if known:
                return fail(E.unknown_member_id)
            group = self._store.groups[req.group_id] = GroupMetadata(
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
            self._rebalance.maybe_complete_join(group)

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
                session, lambda: self._rebalance.expire_pending(group, new_id)
            )
            respond(JoinResult(E.member_id_required, new_id))
        else:
            self._add_member_and_rebalance(group, new_id, req, respond)

    def _join_known(
        self, group: GroupMetadata, req: JoinRequest, respond: Callable[[JoinResult], None]
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            cancel(group.pending_members.pop(member_id))
            self._add_member_and_rebalance(group, member_id, req, respond)
            return
        error = group.current_member_error(member_id, req.group_instance_id)
        if error is not None:
            respond(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # A retried join: the answer it missed.
                respond(join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, respond)
            else:
                respond(join_result(group, member))
        else:
            respond(JoinResult(E.unknown_member_id, member_id))

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
        self._rebalance.schedule_heartbeat(group, member, self._config.new_member_join_timeout_ms)
        self._rebalance.maybe_prepare_rebalance(group, f"member {member_id} joined")

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
        self._rebalance.maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

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
        cancel(old.heartbeat_timer)
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
        self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_state(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                member.join_callback = respond
                self._rebalance.maybe_prepare_rebalance(group, f"static member {new_id} changed protocols")
                return
            try:
                self._store.store_group(group)
            except KafkaError as exc:
                # Undo: the old id keeps its place, the newcomer gets the error.
                group.replace_static_member(req.group_instance_id, new_id, old_id)
                member.protocols = old_protocols
                respond(JoinResult(storage_error(exc), ""))
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
            self._rebalance.prepare_rebalance(group, f"static member {new_id} replaced {old_id} mid-rebalance")
        else:  # PreparingRebalance: wait with the others
            member.join_callback = respond

    def sync_group(self, req: SyncRequest, respond: Callable[[SyncResult], None]) -> None:
        if not valid_group_id(req.group_id, allow_empty=False):
            return respond(SyncResult(E.invalid_group_id))
        group = self._store.get(req.group_id)
        if group is None:
            return respond(SyncResult(E.unknown_member_id))
        if group.is_state(GroupState.DEAD):
            return respond(SyncResult(E.coordinator_not_available))
        error = group.current_member_error(req.member_id, req.group_instance_id)
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
        self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
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
            self._store.store_group(group)
        except KafkaError as exc:
            self._rebalance.propagate_assignment_error(group, storage_error(exc))
            self._rebalance.maybe_prepare_rebalance(group, "could not persist the assignment")
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

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if not valid_group_id(group_id, allow_empty=False):
            return E.invalid_group_id
        group = self._store.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_state(GroupState.DEAD):
            return E.coordinator_not_available
        error = group.current_member_error(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.illegal_generation
        member = group.members[member_id]
        self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per ``(member_id, group_instance_id)`` leaving)."""
        if not valid_group_id(group_id, allow_empty=False):
            return E.invalid_group_id, [E.invalid_group_id] * len(members)
        group = self._store.get(group_id)
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
                cancel(group.pending_members.pop(member_id))
                self._rebalance.maybe_complete_join(group)
                results.append(E.none)
                continue
            member = group.members.get(member_id)
            if member is None:
                results.append(E.unknown_member_id)
                continue
            self._rebalance.remove_member_and_update_group(group, member, "left the group")
            results.append(E.none)
        return E.none, results
