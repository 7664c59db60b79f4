"""Committed offsets are served only once the in-sync replicas hold them (issue 31, item 4).

The fake log here is replicated: every partition has a log end offset and a
replicated offset (the high watermark with enough in-sync replicas) that the
test moves, as the followers' fetches would; :meth:`ReplicatedMemoryLog.lose_tail`
is a failover to a replica that never got the records past the replicated offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from common.errors import ErrorCode
from service.groups import GroupConfig, GroupCoordinator
from service.groups.records import partition_for
from tests.service.groups.test_coordinator import FakeTimer, MemoryLog

E = ErrorCode
TP = ("orders", 0)
PARTITIONS = 4
P = partition_for("g", PARTITIONS)


def exists(_: str) -> bool:
    return True


@dataclass
class ReplicatedMemoryLog(MemoryLog):
    """A :class:`MemoryLog` whose appends count once replicated (see the module docstring)."""

    replicated_to: dict[int, int] = field(default_factory=dict)

    def end_offset(self, partition: int) -> int:
        return sum(1 for p, _, _ in self.records if p == partition)

    def replicated(self, partition: int, offset: int) -> bool:
        return self.replicated_to.get(partition, 0) >= offset

    def replicate(self, partition: int) -> int:
        """The followers caught up with ``partition``: its replicated offset, now its end."""
        self.replicated_to[partition] = self.end_offset(partition)
        return self.replicated_to[partition]

    def lose_tail(self, partition: int) -> None:
        """The leader died: the next one has only what was replicated."""
        kept, seen = [], 0
        for p, k, v in self.records:
            if p == partition:
                seen += 1
                if seen > self.replicated_to.get(partition, 0):
                    continue
            kept.append((p, k, v))
        self.records = kept

    def append_transactional(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                             producer_id: int, producer_epoch: int) -> None:
        self.append(partition, records)

    def open_transactions(self) -> dict[tuple[int, int], list[tuple[bytes, bytes | None]]]:
        return {}

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        yield from super().replay()


@pytest.fixture
def log_() -> ReplicatedMemoryLog:
    return ReplicatedMemoryLog(partitions=PARTITIONS)


def coordinator(log_: ReplicatedMemoryLog, timer: FakeTimer) -> GroupCoordinator:
    coord = GroupCoordinator(log_, timer, GroupConfig())
    coord.load()
    return coord


def fetched(coord: GroupCoordinator, tp: tuple[str, int] = TP) -> int | None:
    error, found = coord.fetch_offsets("g", [tp])
    assert error == E.none
    committed = found[tp]
    return None if committed is None else committed.offset


def commit(coord: GroupCoordinator, offset: int) -> ErrorCode:
    return coord.commit_offsets("g", -1, "", None, {TP: (offset, -1, None)}, exists)[TP]


def test_the_fake_log_is_a_replicated_log(log_: ReplicatedMemoryLog) -> None:
    from service.groups.seams import ReplicatedLog

    assert isinstance(log_, ReplicatedLog)
    assert not isinstance(MemoryLog(), ReplicatedLog)  # the other tests' log: durable on append


def test_an_offset_not_replicated_is_never_served_and_the_previous_one_stays(
    log_: ReplicatedMemoryLog,
) -> None:
    timer = FakeTimer()
    coord = coordinator(log_, timer)
    log_.replicated_to[P] = 1  # the ISR will hold the first record at once
    assert commit(coord, 10) == E.none
    assert fetched(coord) == 10
    # the commit of 50 reaches the leader's log, never the ISR (its request answers an error)
    assert commit(coord, 50) == E.none
    assert fetched(coord) == 10, "served an offset the in-sync replicas do not hold"
    assert coord.committed_offsets() == {"g": {TP: 10}}  # the admin API's view and lag
    # the leadership moves: the next coordinator loads what was replicated, still 10
    coord.unload_partition(P)
    log_.lose_tail(P)
    successor = coordinator(log_, timer)
    assert fetched(successor) == 10


def test_a_commit_is_served_once_the_isr_holds_it(log_: ReplicatedMemoryLog) -> None:
    coord = coordinator(log_, FakeTimer())
    seen: list[int] = []
    coord.replication.on_pending = seen.append  # the broker's runtime waits for the ISR then
    assert commit(coord, 10) == E.none
    assert fetched(coord) is None  # in the leader's log only
    assert seen == [P] and coord.replication.pending_end(P) == 1
    assert coord.replication.replicated(P, log_.replicate(P)) == 1
    assert fetched(coord) == 10 and coord.committed_offsets() == {"g": {TP: 10}}
    assert coord.replication.pending_end(P) is None


def test_offsets_become_visible_in_append_order_as_the_high_watermark_passes_them(
    log_: ReplicatedMemoryLog,
) -> None:
    coord = coordinator(log_, FakeTimer())
    for offset in (10, 20, 30):
        assert commit(coord, offset) == E.none
    assert fetched(coord) is None
    assert coord.replication.replicated(P, 2) == 2  # the first two records are on the ISR
    assert fetched(coord) == 20
    assert coord.replication.pending_end(P) == 3
    assert coord.replication.replicated(P, log_.replicate(P)) == 1
    assert fetched(coord) == 30


def test_a_commit_already_replicated_when_appended_is_served_at_once(log_: ReplicatedMemoryLog) -> None:
    """A partition whose ISR is the leader alone (and min.insync.replicas 1)."""
    coord = coordinator(log_, FakeTimer())
    log_.replicated_to[P] = 1_000
    assert commit(coord, 7) == E.none
    assert fetched(coord) == 7 and coord.replication.pending_end(P) is None


def test_a_leadership_lost_drops_the_pending_offsets_and_a_reload_starts_from_the_log(
    log_: ReplicatedMemoryLog,
) -> None:
    coord = coordinator(log_, FakeTimer())
    coord.serve_partitions()
    coord.load_partition(P, [])
    assert commit(coord, 10) == E.none
    coord.replication.replicated(P, log_.replicate(P))
    assert commit(coord, 50) == E.none
    coord.unload_partition(P)
    assert coord.replication.pending_end(P) is None
    log_.lose_tail(P)
    coord.load_partition(P, list(log_.replay()))
    assert fetched(coord) == 10
    coord.replication.replicated(P, 10_000)  # nothing left over from the old leadership
    assert fetched(coord) == 10


def test_offset_delete_drops_pending_offsets_of_its_partitions(log_: ReplicatedMemoryLog) -> None:
    coord = coordinator(log_, FakeTimer())
    assert commit(coord, 10) == E.none
    coord.replication.replicated(P, log_.replicate(P))
    assert commit(coord, 50) == E.none
    assert coord.delete_offsets("g", [TP]) == (E.none, {TP: E.none})
    coord.replication.replicated(P, log_.replicate(P))
    assert fetched(coord) is None  # the tombstone came after the commit of 50


def test_a_transactions_offsets_are_served_once_its_commit_marker_is_replicated(
    log_: ReplicatedMemoryLog,
) -> None:
    coord = coordinator(log_, FakeTimer())
    assert commit(coord, 10) == E.none
    coord.replication.replicated(P, log_.replicate(P))
    assert coord.txn_commit_offsets("g", 9, 0, -1, "", None, {TP: (40, -1, "")}) == {TP: E.none}
    assert fetched(coord) == 10 and coord.unstable_offsets("g", [TP]) == {TP}
    log_.append(P, [(b"marker", b"")])  # the partition side writes the COMMIT marker, then:
    coord.txn_offsets.on_markers(9, 0, True, [P])
    assert fetched(coord) == 10, "served before its marker is on the in-sync replicas"
    assert coord.unstable_offsets("g", [TP]) == {TP}  # require_stable consumers wait
    assert coord.replication.pending_end(P) == log_.end_offset(P)
    coord.replication.replicated(P, log_.replicate(P))
    assert fetched(coord) == 40 and coord.unstable_offsets("g", [TP]) == set()


def test_an_aborted_transaction_leaves_the_previous_offset(log_: ReplicatedMemoryLog) -> None:
    coord = coordinator(log_, FakeTimer())
    assert commit(coord, 10) == E.none
    coord.replication.replicated(P, log_.replicate(P))
    assert coord.txn_commit_offsets("g", 9, 0, -1, "", None, {TP: (40, -1, "")}) == {TP: E.none}
    coord.txn_offsets.on_markers(9, 0, False, [P])
    coord.replication.replicated(P, log_.replicate(P))
    assert fetched(coord) == 10 and coord.unstable_offsets("g", [TP]) == set()


def test_the_broker_side_waits_for_the_isr_through_timeouts_and_too_few_replicas(
    log_: ReplicatedMemoryLog, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """:class:`OffsetsReplication`: a wait that times out starts again, one that cannot succeed
    now (the ISR below min.insync.replicas, the leadership moving) backs off and retries."""
    from common.errors import NotEnoughReplicasAfterAppendError, RequestTimedOutError
    from service.groups.runtime import OffsetsReplication

    monkeypatch.setattr(OffsetsReplication, "BACKOFF_S", 0.01)
    waits: list[tuple[str, int, int]] = []

    class Broker:
        async def wait_replicated(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
            waits.append((topic, partition, offset))
            if len(waits) == 1:
                raise RequestTimedOutError("the followers are slow")
            if len(waits) == 2:
                raise NotEnoughReplicasAfterAppendError("the ISR shrank below min.insync.replicas")
            log_.replicate(partition)

    async def scenario() -> int | None:
        coord = coordinator(log_, FakeTimer())
        OffsetsReplication(Broker(), coord, 100)  # type: ignore[arg-type]
        assert commit(coord, 10) == E.none
        assert fetched(coord) is None
        for _ in range(200):
            await asyncio.sleep(0.01)
            if coord.replication.pending_end(P) is None:
                break
        return fetched(coord)

    assert asyncio.run(scenario()) == 10
    assert waits == [("__consumer_offsets", P, 1)] * 3


def test_a_broker_that_cannot_confirm_it_still_leads_serves_no_group_from_memory(
    log_: ReplicatedMemoryLog,
) -> None:
    """Paused past its session or cut off from the bucket, the broker may have been replaced
    and a newer commit acknowledged elsewhere: NOT_COORDINATOR, never its own older offset."""
    leads = [True]
    coord = GroupCoordinator(log_, FakeTimer(), GroupConfig(), may_lead=lambda: leads[0])
    coord.begin_loading(P)
    coord.load_partition(P, [], {})
    assert commit(coord, 10) == E.none
    coord.replication.replicated(P, log_.replicate(P))
    assert fetched(coord) == 10
    leads[0] = False
    assert coord.fetch_offsets("g", [TP]) == (E.not_coordinator, {})
    assert commit(coord, 20) == E.not_coordinator
    assert coord.coordinator_error("g") == E.not_coordinator
    assert not coord.may_lead()  # ListGroups answers COORDINATOR_LOAD_IN_PROGRESS
    leads[0] = True  # a heartbeat answered: it still leads, nothing was lost meanwhile
    assert fetched(coord) == 10 and coord.may_lead()


def test_a_topic_deleted_while_a_transaction_holds_its_offsets_gets_none_of_them(
    log_: ReplicatedMemoryLog,
) -> None:
    """Kafka's removeOffsets: the pending offsets of a deleted topic go with its committed ones,
    so a transaction committed after the delete gives a topic created again under the name
    nothing (its consumers would have skipped its first 40 records)."""
    coord = coordinator(log_, FakeTimer())
    other = ("kept", 0)
    assert coord.txn_commit_offsets("g", 9, 0, -1, "", None, {TP: (40, -1, ""), other: (7, -1, "")}) \
        == {TP: E.none, other: E.none}
    assert coord.on_topics_deleted({"orders"}) == 1
    assert coord.unstable_offsets("g", [TP, other]) == {other}
    log_.append(P, [(b"marker", b"")])
    coord.txn_offsets.on_markers(9, 0, True, [P])
    coord.replication.replicated(P, log_.replicate(P))
    assert fetched(coord) is None and fetched(coord, other) == 7
