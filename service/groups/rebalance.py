"""The rebalance state machine of a classic group, and the member sessions that drive it.

:class:`Rebalancer` moves a group through Kafka's states
(:class:`~service.groups.group.GroupState`): a rebalance is prepared when a
member joins, rejoins with other protocols, leaves or times out; it completes
when every known member has rejoined (or the largest rebalance timeout passes),
which drops the members that did not rejoin, bumps the generation, chooses the
protocol and answers the parked JoinGroup requests, the leader's with the member
list. The first rebalance of an empty group waits
``group.initial.rebalance.delay.ms`` for more members, extended while members
keep arriving, up to the rebalance timeout.

Sessions: :meth:`Rebalancer.schedule_heartbeat` pushes a member's deadline (on
every heartbeat, join, sync and commit); a member past it is removed and the
group rebalances, unless a parked JoinGroup or SyncGroup keeps it alive.

The member requests that start all this are :mod:`service.groups.membership`'s.
Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging

from common.errors import ErrorCode
from service.groups.group import GroupMetadata, GroupState, JoinResult, MemberMetadata, SyncResult
from service.groups.requests import GroupConfig
from service.groups.seams import Timer, cancel
from service.groups.store import GroupStore

__all__ = ["Rebalancer"]

log = logging.getLogger("strata.groups")

E = ErrorCode


class Rebalancer:
    def __init__(self, store: GroupStore, timer: Timer, config: GroupConfig) -> None:
        self._store = store
        self._timer = timer
        self._config = config

    # ------------------------------------------------------------------ rebalance

    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self.propagate_assignment_error(group, E.rebalance_in_progress)
        initial = group.is_state(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._timer.now_ms())
        log.info(
            "group %s: preparing to rebalance (generation %d): %s",
            group.group_id, group.generation_id, reason,
        )
        cancel(group.join_timer)
        timeout = group.max_rebalance_timeout_ms()
        if initial:
            delay = min(self._config.initial_rebalance_delay_ms, timeout)
            group.initial_join_pending = True
            group.new_member_added = False
            self._schedule_initial_join(group, delay, max(timeout - delay, 0))
        else:
            group.join_timer = self._timer.call_later(timeout, lambda: self._complete_join(group))

    def _schedule_initial_join(self, group: GroupMetadata, delay: int, remaining: int) -> None:
        def fire() -> None:
            if group.new_member_added and remaining > 0:
                group.new_member_added = False
                step = min(self._config.initial_rebalance_delay_ms, remaining)
                self._schedule_initial_join(group, step, remaining - step)
            else:
                self._complete_join(group)

        group.join_timer = self._timer.call_later(delay, fire)

    def maybe_complete_join(self, group: GroupMetadata) -> None:
        if (
            group.is_state(GroupState.PREPARING_REBALANCE)
            and not group.initial_join_pending
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        cancel(group.join_timer)
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
            self._store.try_store_group(group)
            return
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id, group.generation_id, len(group.members), group.protocol_name,
        )
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
            if callback is not None:
                callback(join_result(group, member))

    def propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        """Answer every parked SyncGroup with ``error`` and clear the assignments."""
        for member in group.members.values():
            member.assignment = b""
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(SyncResult(error))

    # ------------------------------------------------------------------ members

    def _forget_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        group.remove(member.member_id)

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        """Drop a member (its parked requests get UNKNOWN_MEMBER_ID) and rebalance the rest."""
        log.info("group %s: removing member %s: %s", group.group_id, member.member_id, reason)
        join, member.join_callback = member.join_callback, None
        sync, member.sync_callback = member.sync_callback, None
        self._forget_member(group, member)
        if join is not None:
            join(JoinResult(E.unknown_member_id, member.member_id))
        if sync is not None:
            sync(SyncResult(E.unknown_member_id))
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, reason)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self.maybe_complete_join(group)

    # ------------------------------------------------------------------ sessions

    def schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        """The member's session now ends ``timeout_ms`` from now."""
        cancel(member.heartbeat_timer)
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
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
            return
        self.remove_member_and_update_group(group, member, "session timeout expired")

    def expire_pending(self, group: GroupMetadata, member_id: str) -> None:
        """A member that got MEMBER_ID_REQUIRED did not come back within its session."""
        if group.pending_members.pop(member_id, None) is not None:
            log.info("group %s: pending member %s never joined", group.group_id, member_id)
            self.maybe_complete_join(group)


def join_result(group: GroupMetadata, member: MemberMetadata) -> JoinResult:
    """The JoinGroup answer of ``member`` in the group's current generation."""
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
