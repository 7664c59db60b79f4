"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete.

:class:`CommittedOffsets` checks a commit against the group (a member of the
current generation, or anyone for a group with no members, as Kafka's
"simple" consumers do), writes the accepted offsets through the
:class:`~service.groups.store.GroupStore` before they take effect, and answers
with one error code per partition. They take effect, for OffsetFetch and every
other read, once the in-sync replicas hold them (:mod:`service.groups.pending`):
a commit whose write fails to replicate leaves the previous offset served. A commit also counts as a heartbeat of the
committing member. Offsets expire on :mod:`service.groups.expiry`'s schedule.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from common.errors import ErrorCode, KafkaError
from service.groups.errors import storage_error
from service.groups.group import (
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
    TopicPartition,
    valid_group_id,
)
from service.groups.rebalance import Rebalancer
from service.groups.requests import GroupConfig
from service.groups.seams import Timer
from service.groups.store import GroupStore

__all__ = ["CommittedOffsets", "validate_offset_commit"]

E = ErrorCode


class CommittedOffsets:
    def __init__(
        self, store: GroupStore, rebalance: Rebalancer, timer: Timer, config: GroupConfig
    ) -> None:
        self._store = store
        self._rebalance = rebalance
        self._timer = timer
        self._config = config

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

        if not valid_group_id(group_id, allow_empty=True):
            return every(E.invalid_group_id)
        group = self._store.get(group_id)
        if group is None:
            if generation_id >= 0:
                return every(E.illegal_generation)
            group = GroupMetadata(group_id, current_state_timestamp_ms=self._timer.now_ms())
        error = validate_offset_commit(group, generation_id, member_id, instance_id)
        if error is not None:
            return every(error)
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self._timer.now_ms()
        for tp, (offset, epoch, metadata) in offsets.items():
            if not topic_exists(tp[0]):
                results[tp] = E.unknown_topic_or_partition
            elif metadata is not None and len(metadata.encode()) > self._config.offset_metadata_max_bytes:
                results[tp] = E.offset_metadata_too_large
            else:
                accepted[tp] = OffsetAndMetadata(offset, epoch, metadata or "", now)
        if accepted:
            try:
                self._store.commit_offsets(group, accepted)
            except KafkaError as exc:
                code = storage_error(exc)
                results.update(dict.fromkeys(accepted, code))
                return results
            results.update(dict.fromkeys(accepted, E.none))
            member = group.members.get(member_id)
            if member is not None:
                self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
        return results


    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (None: nothing committed); ``partitions=None`` means all."""
        if not valid_group_id(group_id, allow_empty=True):
            return E.invalid_group_id, {}
        group = self._store.get(group_id)
        stored = {} if group is None or group.is_state(GroupState.DEAD) else group.offsets
        if partitions is None:
            return E.none, dict(stored)
        return E.none, {tp: stored.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for topics the live group still subscribes to."""
        if not valid_group_id(group_id, allow_empty=False):
            return E.invalid_group_id, {}
        group = self._store.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return E.group_id_not_found, {}
        if group.is_empty():
            subscribed: set[str] = set()
        elif group.protocol_type == "consumer":
            subscribed = group.subscribed_topics() or set()
        else:
            return E.non_empty_group, {}
        results: dict[TopicPartition, ErrorCode] = {}
        removable = []
        known = self._store.known_partitions(group)
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = E.group_subscribed_to_topic
            else:
                results[tp] = E.none
                if tp in known:
                    removable.append(tp)
        if removable:
            try:
                self._store.remove_offsets(group, removable)
            except KafkaError as exc:
                return storage_error(exc), {}
        return E.none, results


def validate_offset_commit(
    group: GroupMetadata, generation_id: int, member_id: str, instance_id: str | None,
    transactional: bool = False,
) -> ErrorCode | None:
    """Kafka's ``ClassicGroup.validateOffsetCommit``: OffsetCommit, or TxnOffsetCommit
    (``transactional``: member id and generation may be left out, the state is not checked)."""
    if group.is_state(GroupState.DEAD):
        return E.coordinator_not_available
    if generation_id < 0 and group.is_state(GroupState.EMPTY):
        return None  # an admin client or a consumer outside group management
    if generation_id >= 0 or member_id or instance_id is not None:
        error = group.current_member_error(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.illegal_generation
    elif not transactional:
        return E.unknown_member_id  # only members commit to a group that has members
    if not transactional and group.is_state(GroupState.COMPLETING_REBALANCE):
        return E.rebalance_in_progress
    return None
