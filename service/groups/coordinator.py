"""The group coordinator: Kafka's classic rebalance protocol and committed offsets, sans I/O.

One :class:`GroupCoordinator` owns every group of this broker (single node: it
coordinates all of them). It follows Kafka's ``GroupCoordinator`` closely and is
the one object the request handlers and the admin API talk to; the work is done
by the parts it wires together, one module each:

* :mod:`~service.groups.membership`: JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup, validated against the group and answered through callbacks;
* :mod:`~service.groups.rebalance`: the state machine (prepare and complete a
  rebalance, the initial delay) and the member sessions that drive it;
* :mod:`~service.groups.offsets`: OffsetCommit, OffsetFetch, OffsetDelete;
* :mod:`~service.groups.expiry`: the periodic expiry of old offsets and groups;
* :mod:`~service.groups.store`: the registry of groups, and everything written
  to ``__consumer_offsets`` (Kafka's records, :mod:`~service.groups.records`),
  always before it takes effect in memory; :meth:`GroupCoordinator.load`
  rebuilds every group from that log at start.

Here are the lifecycle and the admin reads (DescribeGroups, ListGroups,
DeleteGroups). Nothing does I/O itself: time and timers come from a
:class:`~service.groups.seams.Timer`, the log is an
:class:`~service.groups.seams.OffsetLog`; both are swapped for fakes in the
unit tests.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from local_tier.errors import ErrorCode, KafkaError
from service.groups.errors import storage_error
from service.groups.expiry import OffsetExpiry
from service.groups.group import (
    GroupMetadata,
    GroupState,
    JoinResult,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
    valid_group_id,
)
from service.groups.membership import Membership
from service.groups.offsets import CommittedOffsets
from service.groups.rebalance import Rebalancer
from service.groups.requests import (
    GroupConfig,
    GroupSummary,
    JoinRequest,
    MemberSummary,
    SyncRequest,
)
from service.groups.seams import OffsetLog, Timer, cancel
from service.groups.store import GroupStore
from service.groups.txn_offsets import TransactionalOffsets

__all__ = ["GroupCoordinator"]

E = ErrorCode


class GroupCoordinator:
    def __init__(self, log_: OffsetLog, timer: Timer, config: GroupConfig | None = None) -> None:
        self.config = config or GroupConfig()
        self._timer = timer
        self._store = GroupStore(log_)
        self._rebalance = Rebalancer(self._store, timer, self.config)
        self._members = Membership(self._store, self._rebalance, timer, self.config)
        self._offsets = CommittedOffsets(self._store, self._rebalance, timer, self.config)
        self._expiry = OffsetExpiry(self._store, timer, self.config)
        #: TxnOffsetCommit's pending offsets (:mod:`~service.groups.txn_offsets`)
        self.txn_offsets = TransactionalOffsets(self._store, log_, timer)

    # ================================================================== lifecycle

    def load(self) -> None:
        """Rebuild groups and offsets from the log; start member sessions and offset expiry."""
        self._store.load(self._timer.now_ms())
        self.txn_offsets.restore()
        for group in self._store.groups.values():
            for member in group.members.values():
                self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
        self._expiry.schedule()

    def shutdown(self) -> None:
        """Cancel every timer; parked join/sync answers are dropped with the connections."""
        self._expiry.cancel()
        for group in self._store.groups.values():
            for member in group.members.values():
                cancel(member.heartbeat_timer)
            for handle in group.pending_members.values():
                cancel(handle)
            cancel(group.join_timer)

    def ensure_offsets_topic(self) -> int:
        return self._store.ensure_offsets_topic()

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group (tests and the admin API read it; do not mutate)."""
        return self._store.get(group_id)

    # ================================================================== member requests

    def join_group(self, req: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """Answer through ``respond``, now or once the rebalance completes."""
        self._members.join_group(req, respond)

    def sync_group(self, req: SyncRequest, respond: Callable[[SyncResult], None]) -> None:
        """Answer through ``respond``, now or once the leader brings the assignment."""
        self._members.sync_group(req, respond)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        return self._members.heartbeat(group_id, generation_id, member_id, instance_id)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per ``(member_id, group_instance_id)`` leaving)."""
        return self._members.leave_group(group_id, members)

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
        return self._offsets.commit_offsets(
            group_id, generation_id, member_id, instance_id, offsets, topic_exists
        )

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (None: nothing committed); ``partitions=None`` means all."""
        return self._offsets.fetch_offsets(group_id, partitions)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for topics the live group still subscribes to."""
        return self._offsets.delete_offsets(group_id, partitions)

    def expire_offsets(self) -> int:
        """One pass of offset expiry now (it also runs on its schedule); offsets removed."""
        return self._expiry.expire_offsets()

    # ================================================================== admin

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        dead = GroupSummary(group_id, GroupState.DEAD.value, "", "", -1, ())
        if not valid_group_id(group_id, allow_empty=True):
            return E.invalid_group_id, dead
        group = self._store.get(group_id)
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
            for g in self._store.groups.values()
            if g.offsets
        }

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every live group, optionally by state."""
        wanted = {s.lower() for s in states}
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self._store.groups.values()
            if not g.is_state(GroupState.DEAD) and (not wanted or g.state.value.lower() in wanted)
        ]

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if not valid_group_id(group_id, allow_empty=True):
                results[group_id] = E.invalid_group_id
                continue
            group = self._store.get(group_id)
            if group is None or group.is_state(GroupState.DEAD):
                results[group_id] = E.group_id_not_found
            elif not group.is_state(GroupState.EMPTY):
                results[group_id] = E.non_empty_group
            else:
                try:
                    self._store.delete_group(group, self._timer.now_ms())
                    results[group_id] = E.none
                except KafkaError as exc:
                    results[group_id] = storage_error(exc)
        return results
