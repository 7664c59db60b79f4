"""The group coordinator: Kafka's classic rebalance protocol and committed offsets, sans I/O.

One :class:`GroupCoordinator` owns every group of this broker (single node: it
coordinates all of them). It follows Kafka's ``GroupCoordinator`` closely and is
the one object the request handlers and the admin API talk to; the work is done
by the parts it wires together, one module each:

* :mod:`~service.groups.membership`: JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup, validated against the group and answered through callbacks;
* :mod:`~service.groups.rebalance`: the state machine (prepare and complete a
  rebalance, the initial delay) and the member sessions that drive it;
* :mod:`~service.groups.offsets`: OffsetCommit, OffsetFetch, OffsetDelete (served
  once replicated: :mod:`~service.groups.pending`, :attr:`GroupCoordinator.replication`);
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

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from common.errors import ErrorCode, KafkaError
from service.groups.consumer import (
    ConsumerGroups,
    ConsumerHeartbeat,
    DescribedConsumerGroup,
    HeartbeatResult,
    Heartbeats,
)
from service.groups.consumer.classic import ClassicMembers
from service.groups.consumer.groups import tombstones
from service.groups.consumer.model import ConsumerGroup
from service.groups.consumer.records import is_consumer_record
from service.groups.errors import storage_error
from service.groups.expiry import OffsetExpiry
from service.groups.group import (
    MAX_GROUP_ID_LENGTH,
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
from service.groups.pending import Replication
from service.groups.rebalance import Rebalancer
from service.groups.requests import (
    GroupConfig,
    GroupSummary,
    JoinRequest,
    MemberSummary,
    SyncRequest,
)
from service.groups.seams import NoTopics, OffsetLog, Timer, TopicsImage, cancel
from service.groups.store import GroupStore
from service.groups.txn_offsets import TransactionalOffsets

__all__ = ["GroupCoordinator"]

E = ErrorCode


class GroupCoordinator:
    def __init__(self, log_: OffsetLog, timer: Timer, config: GroupConfig | None = None,
                 topics: TopicsImage | None = None, may_lead: Callable[[], bool] = lambda: True) -> None:
        self.config = config or GroupConfig()
        self._may_lead = may_lead  # whether the broker can still confirm its leaderships
        self._timer = timer
        self._store = GroupStore(log_)
        self._consumers = ConsumerGroups(self._store, timer, topics or NoTopics())
        self._heartbeats = Heartbeats(self._consumers, timer, self.config)
        self._rebalance = Rebalancer(self._store, timer, self.config)
        self._members = Membership(self._store, self._rebalance, timer, self.config)
        self._offsets = CommittedOffsets(self._store, self._rebalance, timer, self.config)
        self._expiry = OffsetExpiry(self._store, timer, self.config)
        self._classic = ClassicMembers(self._consumers, self._heartbeats, self._store, self._rebalance, timer,
                                       self.config)
        #: the __consumer_offsets partitions whose groups this coordinator serves (None:
        #: every group, as :meth:`load` sets up; a broker in a cluster loads partitions
        #: one by one as it becomes their leader)
        self._owned: set[int] | None = None
        self._loading: set[int] = set()
        self._expiry_scheduled = False
        #: TxnOffsetCommit's pending offsets (:mod:`~service.groups.txn_offsets`)
        self.txn_offsets = TransactionalOffsets(self._store, log_, timer)
        #: committed offsets waiting for the ISR; the broker reports their replication
        self.replication: Replication = self._store

    # ================================================================== lifecycle

    def load(self) -> None:
        """Rebuild groups and offsets from the log; start member sessions and offset expiry."""
        self._store.load(self._timer.now_ms(), self._load_consumer_record)
        self._consumers.finish_load()
        self.txn_offsets.restore()
        for group in self._store.groups.values():
            for member in group.members.values():
                self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
        for consumer_group in self._consumers.groups.values():
            self._heartbeats.schedule_all(consumer_group)
        self._expiry_scheduled = True
        self._expiry.schedule()

    # ================================================================== partitions

    def serve_partitions(self) -> None:
        """From now on serve only the partitions given to :meth:`load_partition` (a broker
        in a cluster coordinates the groups of the partitions it leads)."""
        if self._owned is None:
            self._owned = set()

    def begin_loading(self, partition: int) -> None:
        """This broker now leads ``partition``: its groups answer COORDINATOR_LOAD_IN_PROGRESS
        until :meth:`load_partition` (the records are read off the event loop meanwhile)."""
        self.serve_partitions()
        self._loading.add(partition)

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def load_partition(
        self,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        open_transactions: Mapping[tuple[int, int], Sequence[tuple[bytes, bytes | None]]] | None = None,
    ) -> None:
        """Rebuild the groups of ``partition`` from its records and start serving them
        (Kafka's ``GroupMetadataManager.loadGroupsAndOffsets``); ``open_transactions``: the
        transactional offsets the replay found without a marker yet (pending again)."""
        self.serve_partitions()
        assert self._owned is not None
        self._loading.discard(partition)
        self._store.pending.drop_partition(partition)  # left from an earlier leadership
        self._store.load(self._timer.now_ms(), self._load_consumer_record, records)
        self._consumers.finish_load()
        self.txn_offsets.restore(open_transactions or {})
        for group in self._store.groups.values():
            if self._store.partition_of(group.group_id) != partition:
                continue
            for member in group.members.values():
                self._rebalance.schedule_heartbeat(group, member, member.session_timeout_ms)
        for consumer_group in self._consumers.groups.values():
            if self._store.partition_of(consumer_group.group_id) == partition:
                self._heartbeats.schedule_all(consumer_group)
        if not self._expiry_scheduled:
            self._expiry_scheduled = True
            self._expiry.schedule()
        self._owned.add(partition)

    def unload_partition(self, partition: int) -> None:
        """Stop serving the groups of ``partition`` (another broker leads it now): their
        timers stop and parked requests are answered NOT_COORDINATOR by their clients'
        retries (Kafka's ``removeGroupsForPartition``)."""
        self.serve_partitions()
        assert self._owned is not None
        self._loading.discard(partition)
        self._owned.discard(partition)
        self.txn_offsets.unload(partition)
        for group in self._store.unload(partition):
            for member in group.members.values():
                cancel(member.heartbeat_timer)
            for handle in group.pending_members.values():
                cancel(handle)
            cancel(group.join_timer)
            consumer_group = self._consumers.groups.pop(group.group_id, None)
            if consumer_group is not None:
                for handles in consumer_group.timers.values():
                    for handle in handles:
                        cancel(handle)

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when this coordinator does not
        serve ``group_id`` now (Kafka's ``validateGroupStatus``); None when it does."""
        if self._owned is None:
            return None
        try:
            partition = self._store.partition_of(group_id)
        except KafkaError:
            return E.coordinator_not_available
        if partition in self._loading:
            return E.coordinator_load_in_progress
        if partition not in self._owned or not self._may_lead():  # paused, cut off: maybe replaced
            return E.not_coordinator
        return None

    def _load_consumer_record(self, key: bytes, value: bytes | None) -> bool:
        if not is_consumer_record(key):
            return False
        self._consumers.replay_raw(key, value)
        return True

    def shutdown(self) -> None:
        """Cancel every timer; parked join/sync answers are dropped with the connections, and
        offsets waiting for the ISR with the partitions (their waits then end)."""
        self._expiry.cancel()
        self._store.pending.clear()
        for group in self._store.groups.values():
            for member in group.members.values():
                cancel(member.heartbeat_timer)
            for handle in group.pending_members.values():
                cancel(handle)
            cancel(group.join_timer)
        for consumer_group in self._consumers.groups.values():
            for handles in consumer_group.timers.values():
                for handle in handles:
                    cancel(handle)

    def ensure_offsets_topic(self) -> int:
        return self._store.ensure_offsets_topic()

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group (tests and the admin API read it; do not mutate)."""
        return self._store.get(group_id)

    # ================================================================== member requests

    def join_group(self, req: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """Answer through ``respond``, now or once the rebalance completes.

        A consumer-protocol group of that id: an empty one becomes a classic group
        (Kafka 4); one with members takes the member in as a classic member
        (:mod:`~service.groups.consumer.classic`, ADR 0015).
        """
        if (error := self.coordinator_error(req.group_id)) is not None:
            return respond(JoinResult(error, req.member_id))
        consumer_group = self._consumers.get(req.group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return self._classic.join(consumer_group, req, respond)
            try:
                self._consumers.convert_to_classic(consumer_group)
            except KafkaError as exc:
                return respond(JoinResult(storage_error(exc), req.member_id))
        self._members.join_group(req, respond)

    def sync_group(self, req: SyncRequest, respond: Callable[[SyncResult], None]) -> None:
        """Answer through ``respond``, now or once the leader brings the assignment."""
        if (error := self.coordinator_error(req.group_id)) is not None:
            return respond(SyncResult(error))
        if (consumer_group := self._consumers.get(req.group_id)) is not None:
            return self._classic.sync(consumer_group, req, respond)
        self._members.sync_group(req, respond)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if (error := self.coordinator_error(group_id)) is not None:
            return error
        if (consumer_group := self._consumers.get(group_id)) is not None:
            return self._classic.heartbeat(consumer_group, generation_id, member_id, instance_id)
        return self._members.heartbeat(group_id, generation_id, member_id, instance_id)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per ``(member_id, group_instance_id)`` leaving)."""
        if (error := self.coordinator_error(group_id)) is not None:
            return error, []
        if (consumer_group := self._consumers.get(group_id)) is not None:
            return self._classic.leave(consumer_group, members)
        return self._members.leave_group(group_id, members)

    # ================================================================== consumer protocol

    def consumer_group_heartbeat(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848); errors are codes in the result."""
        if len(req.group_id) > MAX_GROUP_ID_LENGTH:
            return HeartbeatResult(E.invalid_group_id, "group id too long")
        if (error := self.coordinator_error(req.group_id)) is not None:
            return HeartbeatResult(error, None)
        return self._heartbeats.heartbeat(req)

    def consumer_group_describe(self, group_id: str) -> DescribedConsumerGroup:
        """ConsumerGroupDescribe of one group (GROUP_ID_NOT_FOUND unless a consumer group)."""
        if not valid_group_id(group_id, allow_empty=False):
            return DescribedConsumerGroup(group_id, E.invalid_group_id, "invalid group id")
        if (error := self.coordinator_error(group_id)) is not None:
            return DescribedConsumerGroup(group_id, error)
        return self._consumers.describe(group_id, self.config.consumer_assignors[0])

    def is_consumer_group(self, group_id: str) -> bool:
        return self._consumers.get(group_id) is not None

    # ================================================================== offsets

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
        topic_exists: Callable[[str], bool],
        api_version: int = 9,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store ``(offset, leader_epoch, metadata)`` per partition; an error code per partition.

        For a consumer-protocol group ``generation_id`` is the member epoch, checked
        as Kafka does (STALE_MEMBER_EPOCH, OffsetCommit v9+ for its members).
        """
        if (gate := self.coordinator_error(group_id)) is not None:
            return dict.fromkeys(offsets, gate)
        consumer_group = self._consumers.get(group_id)
        if consumer_group is not None:
            error = self._consumers.validate_commit(consumer_group, member_id, generation_id, api_version)
            if error is not None:
                return dict.fromkeys(offsets, error)
            generation_id, member_id, instance_id = -1, "", None  # checked: commit as the group
        return self._offsets.commit_offsets(
            group_id, generation_id, member_id, instance_id, offsets, topic_exists
        )

    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the offsets wait in the producer's transaction (:mod:`.txn_offsets`).

        For a consumer-protocol group ``generation_id`` is the member epoch, checked as
        Kafka's ``validateTransactionalOffsetCommit`` does (a stale epoch is ILLEGAL_GENERATION).
        """
        if (gate := self.coordinator_error(group_id)) is not None:
            return dict.fromkeys(offsets, gate)
        consumer_group = self._consumers.get(group_id)
        if consumer_group is not None:
            error = self._consumers.validate_commit(
                consumer_group, member_id, generation_id, 0, transactional=True, instance_id=instance_id
            )
            if error is not None:
                code = E.illegal_generation if error == E.stale_member_epoch else error
                return dict.fromkeys(offsets, code)
            generation_id, member_id, instance_id = -1, "", None  # checked: commit as the group
        return self.txn_offsets.commit(
            group_id, producer_id, producer_epoch, generation_id, member_id, instance_id, offsets,
            self.config.offset_metadata_max_bytes,
        )

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (None: nothing committed); ``partitions=None`` means all.

        ``member_id``/``member_epoch`` (OffsetFetch v9) are checked for consumer-protocol groups.
        """
        if (gate := self.coordinator_error(group_id)) is not None:
            return gate, {}
        consumer_group = self._consumers.get(group_id)
        if consumer_group is not None:
            error = self._consumers.validate_fetch(consumer_group, member_id, member_epoch)
            if error is not None:
                return error, {}
        return self._offsets.fetch_offsets(group_id, partitions)

    def unstable_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Those of ``partitions`` an open transaction, or one whose COMMIT marker is not
        replicated yet, holds an offset of for the group (KIP-447: OffsetFetch with
        require_stable answers them UNSTABLE_OFFSET_COMMIT)."""
        return {tp for tp in partitions if self.txn_offsets.has_pending(group_id, tp)}

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for topics the live group still subscribes to."""
        if (error := self.coordinator_error(group_id)) is not None:
            return error, {}
        return self._offsets.delete_offsets(group_id, partitions)

    def expire_offsets(self) -> int:
        """One pass of offset expiry now (it also runs on its schedule); offsets removed."""
        return self._expiry.expire_offsets()

    def on_topics_deleted(self, topics: Collection[str]) -> int:
        """Tombstone every group's committed offsets of deleted ``topics``, and forget those
        open transactions hold; offsets removed."""
        return self._expiry.remove_topics(topics) + self.txn_offsets.drop_topics(topics)

    # ================================================================== admin

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        dead = GroupSummary(group_id, GroupState.DEAD.value, "", "", -1, ())
        if not valid_group_id(group_id, allow_empty=True):
            return E.invalid_group_id, dead
        if (error := self.coordinator_error(group_id)) is not None:
            return error, dead
        group = self._store.get(group_id)
        if group is None or group.consumer is not None:
            return E.none, dead  # Kafka's DescribeGroups knows classic groups only
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
        """Committed offset of every partition of every group (for metrics and the admin API):
        those replicated, as OffsetFetch answers them."""
        return {
            g.group_id: {tp: om.offset for tp, om in g.offsets.items()}
            for g in self._store.groups.values()
            if g.offsets
        }

    def may_lead(self) -> bool:  # False: paused or cut off, its groups may be another's by now
        return self._may_lead()

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)`` of every live group, optionally by state."""
        return [(g, p, s) for g, p, s, _ in self.list_groups_by_type(states)]

    def list_groups_by_type(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[tuple[str, str, str, str]]:
        """``(group_id, protocol_type, state, type)``, type "classic" or "consumer" (any case)."""
        wanted = {s.lower() for s in states}
        kinds = {t.lower() for t in types}
        out = []
        if not kinds or "classic" in kinds:
            out += [
                (g.group_id, g.protocol_type or "", g.state.value, "classic")
                for g in self._store.groups.values()
                if g.consumer is None and not g.is_state(GroupState.DEAD)
                and (not wanted or g.state.value.lower() in wanted)
            ]
        if not kinds or "consumer" in kinds:
            out += [(g, "consumer", s, "consumer") for g, s in self._consumers.list(wanted)]
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if not valid_group_id(group_id, allow_empty=True):
                results[group_id] = E.invalid_group_id
                continue
            if (error := self.coordinator_error(group_id)) is not None:
                results[group_id] = error
                continue
            group = self._store.get(group_id)
            consumer_group = self._consumers.get(group_id)
            if consumer_group is not None:
                results[group_id] = self._delete_consumer_group(consumer_group, group)
            elif group is None or group.is_state(GroupState.DEAD):
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

    def _delete_consumer_group(self, group: ConsumerGroup, holder: GroupMetadata | None) -> ErrorCode:
        if group.members:
            return E.non_empty_group
        try:
            self._consumers.write(group.group_id, tombstones(group))
            if holder is not None:
                holder.consumer = None
                self._store.delete_group(holder, self._timer.now_ms())
        except KafkaError as exc:
            return storage_error(exc)
        return E.none

