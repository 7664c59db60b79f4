"""Issue 33: followers fetch in incremental fetch sessions (KIP-227). An idle follower of
many partitions names none of them, and its leader reads none of them: it reads the
partitions the request names and the ones touched since (an append, a high watermark).
The follower's half (:class:`FollowerSession`) and the leader's (:func:`read_for_follower`)
run together here on a real ReplicaManager with real logs; only the socket is left out."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.errors import ErrorCode
from controller.document import ClusterMetadata
from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, Endpoint, PartitionRegistration
from fetch.planner import PARTITIONS_PER_TURN
from fetch.sessions import FetchSessionCache
from fetch.waiter import AppendWaiters
from local_tier.manager import LogManager
from service.handlers.fetch_topics import by_name
from service.replication import leader as leader_module
from service.replication.fetch_session import FetchPlan, FollowerSession, fetch_request
from service.replication.leader import FollowerAnswer, read_for_follower
from service.replication.partition import Partition, monotonic_ms
from service.replication.replica_manager import ReplicaManager
from tests.local_tier.batches import make_batch, small_config
from tests.service.replication.test_isr_watch import Submitted

PARTITIONS = 200
FOLLOWER = 3
LIMITS = SimpleNamespace(node_id=FOLLOWER, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20,
                         partition_max_bytes=1 << 20)


@pytest.fixture()
def leader(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """Broker 1 leads ``t-0`` .. ``t-199`` with broker 3 in every ISR."""
    logs = LogManager(tmp_path)
    logs.load(lambda _topic: small_config())
    waiters = AppendWaiters()
    manager = ReplicaManager(1, logs, lambda _topic: small_config(), waiters)
    manager.isr_changes = Submitted()
    topic = TopicInfo("t", uuid.uuid4(), PARTITIONS)
    registrations = tuple(PartitionRegistration((1, FOLLOWER), (1, FOLLOWER), 1, 0, 0)
                          for _ in range(PARTITIONS))
    manager.apply(ClusterMetadata("c", topics={"t": topic}, partitions={topic.topic_id: registrations}))
    yield SimpleNamespace(replicas=manager, waiters=waiters, fetch_max_bytes=1 << 26,
                          fetch_sessions=FetchSessionCache(10))
    logs.shutdown()


def _same(position: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    return position


class _Follower:
    """The follower's side: where it stands in each partition, and its session."""

    def __init__(self, partitions: int, limits: SimpleNamespace = LIMITS) -> None:
        self.session = FollowerSession()
        self.limits = limits
        #: fetch offset, leader epoch, last fetched epoch, log start
        self.positions = {("t", i): (0, 0, -1, 0) for i in range(partitions)}
        self.named: list[int] = []  # partitions each request named

    async def fetch(self, host: SimpleNamespace, *, max_wait_ms: int = 50) -> tuple[FetchPlan, FollowerAnswer]:
        plan = self.session.plan(dict(self.positions), _same)
        request = fetch_request(12, plan, True, self.limits, {})
        self.named.append(sum(len(t.partitions) for t in request.topics))
        answer = await read_for_follower(host, request, FOLLOWER, max_wait_ms)
        assert self.session.answered(plan, answer.error_code, answer.session_id)
        return plan, answer


def _append(host: SimpleNamespace, index: int, count: int = 3) -> Partition:
    partition = host.replicas.partitions[("t", index)]
    partition.log.append_as_leader(make_batch(count), partition.leader_epoch)
    host.replicas.after_append(partition)
    return partition


def test_an_idle_follower_names_no_partition_and_its_leader_reads_none(
    leader: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower = _Follower(PARTITIONS)

    async def run() -> list[int]:
        plan, answer = await follower.fetch(leader)
        assert plan.full and follower.session.session_id != 0
        assert len(answer.partitions) == PARTITIONS  # the full fetch answers every partition
        reads: list[int] = []
        real = Partition.check_leader

        def counted(partition: Partition, *args, **kwargs):  # type: ignore[no-untyped-def]
            reads.append(partition.index)
            return real(partition, *args, **kwargs)

        monkeypatch.setattr(Partition, "check_leader", counted)
        for _ in range(3):
            plan, answer = await follower.fetch(leader, max_wait_ms=20)
            assert not plan.full and answer.partitions == []
        return reads

    reads = asyncio.run(run())
    assert follower.named == [PARTITIONS, 0, 0, 0]
    assert reads == []  # the leader looked at no partition of the idle session
    assert follower.session.incremental_fetches == 3


def test_an_append_wakes_the_session_and_only_that_partition_is_sent(leader: SimpleNamespace) -> None:
    follower = _Follower(PARTITIONS)

    async def run() -> FollowerAnswer:
        await follower.fetch(leader)
        waiting = asyncio.ensure_future(follower.fetch(leader, max_wait_ms=5_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # long-polling on the session's watch
        started = asyncio.get_running_loop().time()
        _append(leader, 17)
        _, answer = await waiting
        assert asyncio.get_running_loop().time() - started < 1.0
        return answer

    answer = asyncio.run(run())
    assert [(d.partition, d.high_watermark) for d in answer.partitions] == [(17, 0)]
    assert answer.partitions[0].size > 0  # high watermark 0: the follower holds none yet

    async def next_round() -> FollowerAnswer:
        # the follower names t-17 at its new position: the high watermark moves to it
        follower.positions[("t", 17)] = (3, 0, 0, 0)
        _, answer = await follower.fetch(leader, max_wait_ms=200)
        return answer

    answer = asyncio.run(next_round())
    assert follower.named[-1] == 1
    assert [(d.partition, d.high_watermark, d.size) for d in answer.partitions] == [(17, 3, 0)]
    assert leader.replicas.partitions[("t", 17)].log.high_watermark == 3


def test_what_did_not_fit_in_the_fetch_that_opened_the_session_is_read_in_the_next_ones(
    leader: SimpleNamespace,
) -> None:
    """A follower names a partition only when its position moved: a partition left out of
    the session's first (full) answer for lack of room was never read again until something
    was appended to it, so a restarted follower never caught up on idle partitions (stop 72)."""
    for index in range(PARTITIONS):
        _append(leader, index, count=20)  # about 400 bytes each: ten fit in 4,000
    follower = _Follower(PARTITIONS, SimpleNamespace(**{**vars(LIMITS), "max_bytes": 4_000}))
    got: set[int] = set()

    async def run() -> None:
        for _ in range(PARTITIONS // 5):
            _, answer = await follower.fetch(leader, max_wait_ms=5)
            for d in answer.partitions:
                if d.size:
                    got.add(d.partition)
                    end = leader.replicas.partitions[("t", d.partition)].log.log_end_offset
                    follower.positions[("t", d.partition)] = (end, 0, 0, 0)
            if len(got) == PARTITIONS:
                return

    asyncio.run(run())
    assert len(got) == PARTITIONS, f"{PARTITIONS - len(got)} partitions never read"
    assert follower.session.full_fetches == 1


def test_a_full_fetch_reads_its_partitions_in_turns_of_the_loop_and_misses_no_append_meanwhile(
    leader: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's first fetch of 3,000 partitions held its leader's loop 75-150 ms in one
    go (stop 72): it is read 64 partitions a turn. t-0, read in the first turn, gets an
    append in a later one: the session opened by that fetch sends it next time."""
    follower = _Follower(PARTITIONS)
    turns = 0
    real = leader_module._read

    def read_then_append(replicas, wanted, *args, **kwargs):  # type: ignore[no-untyped-def]
        answer = real(replicas, wanted, *args, **kwargs)
        if wanted[0][0].partition == 0:  # the slice holding t-0 was read: append to it now
            _append(leader, 0)
        return answer

    async def ticking() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def run() -> FollowerAnswer:
        ticker = asyncio.ensure_future(ticking())
        await asyncio.sleep(0)
        before = turns
        plan, answer = await follower.fetch(leader, max_wait_ms=0)
        assert plan.full and len(answer.partitions) == PARTITIONS
        assert not any(d.size for d in answer.partitions)
        assert turns - before >= 2 * (PARTITIONS // PARTITIONS_PER_TURN)  # its checks and its reads
        monkeypatch.setattr(leader_module, "_read", real)
        _, answer = await follower.fetch(leader, max_wait_ms=2_000)
        ticker.cancel()
        return answer

    monkeypatch.setattr(leader_module, "_read", read_then_append)
    answer = asyncio.run(run())
    assert [(d.partition, d.size > 0) for d in answer.partitions] == [(0, True)]


def test_a_forgotten_partition_is_no_longer_answered(leader: SimpleNamespace) -> None:
    follower = _Follower(PARTITIONS)

    async def run() -> FollowerAnswer:
        await follower.fetch(leader)
        del follower.positions[("t", 5)]  # parked, say
        plan, answer = await follower.fetch(leader, max_wait_ms=10)
        assert plan.forgotten == [("t", 5)]
        _append(leader, 5)
        _, answer = await follower.fetch(leader, max_wait_ms=50)
        return answer

    assert asyncio.run(run()).partitions == []
    session = leader.fetch_sessions.get(follower.session.session_id)
    assert ("t", 5) not in session.partitions and ("t", 5) not in session.attached.watch.keys


def test_an_unknown_session_starts_over_with_a_full_fetch(leader: SimpleNamespace) -> None:
    follower = _Follower(10)

    async def run() -> None:
        await follower.fetch(leader)
        old = follower.session.session_id
        leader.fetch_sessions.close()  # a restarted leader knows no session
        plan = follower.session.plan(dict(follower.positions), _same)
        answer = await read_for_follower(leader, fetch_request(12, plan, True, LIMITS, {}), FOLLOWER, 10)
        assert answer.error_code == ErrorCode.fetch_session_id_not_found
        assert not follower.session.answered(plan, answer.error_code, answer.session_id)
        plan, answer = await follower.fetch(leader)
        assert plan.full and plan.session_id == 0 and len(answer.partitions) == 10
        assert follower.session.session_id not in (0, old)

    asyncio.run(run())


def test_a_failed_request_closes_the_session_it_named() -> None:
    session = FollowerSession()
    positions = {("t", 0): (0, 0, -1, 0)}
    plan = session.plan(positions, _same)
    session.answered(plan, ErrorCode.none, 77)
    assert session.plan(positions, _same).send == []  # nothing changed
    session.failed()
    plan = session.plan(positions, _same)
    assert plan.full and plan.session_id == 77 and plan.send == [("t", 0)]


def test_only_the_partitions_whose_logs_changed_are_looked_at() -> None:
    """Between rescans of the fetcher's partitions, a plan looks only at the touched ones."""
    session = FollowerSession()
    positions = {("t", i): (0, 0, -1, 0) for i in range(1000)}
    session.answered(session.plan(positions, _same), ErrorCode.none, 9)
    looked: list[tuple[int, int, int, int]] = []

    def position(pos: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        looked.append(pos)
        return pos

    positions[("t", 4)] = (5, 0, 0, 0)
    plan = session.plan(positions, position, {("t", 4), ("t", 5), ("gone", 0)})
    assert plan.send == [("t", 4)] and plan.forgotten == [] and len(looked) == 2
    session.answered(plan, ErrorCode.none, 9)
    del positions[("t", 7)]
    plan = session.plan(positions, position)  # a rescan: every partition, and the forgotten one
    assert plan.send == [] and plan.forgotten == [("t", 7)]


def test_a_leader_without_sessions_gets_full_fetches() -> None:
    session = FollowerSession()
    positions = {("t", 0): (0, 0, -1, 0), ("t", 1): (4, 0, 0, 0)}
    for _ in range(2):
        plan = session.plan(positions, _same)
        assert plan.full and plan.send == list(positions)
        assert session.answered(plan, ErrorCode.none, 0)


@pytest.mark.parametrize("fetching", [True, False])
def test_a_live_session_keeps_an_idle_follower_in_the_isr_and_a_stopped_one_is_dropped(
    leader: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, fetching: bool
) -> None:
    """The follower named t-3 once, at the log end; then, for longer than
    replica.lag.time.max.ms, it went on with empty fetches in its session (Kafka's leader
    notes a fetch of every session partition each time: an append must not find it out of
    sync), or it stopped fetching (the append drops it from the ISR)."""
    follower = _Follower(PARTITIONS)
    max_lag_ms = 30_000
    now = [monotonic_ms()]
    monkeypatch.setattr("service.replication.replica_manager.monotonic_ms", lambda: now[0])

    async def run() -> int:
        await follower.fetch(leader)
        now[0] += 2 * max_lag_ms
        if fetching:
            await follower.fetch(leader, max_wait_ms=5)
        _append(leader, 3)
        return leader.replicas.shrink_isrs(max_lag_ms)

    assert asyncio.run(run()) == (0 if fetching else 1)
    assert leader.replicas.isr_changes.proposals == ([] if fetching else [("t-3", (1,))])


def _with_brokers(host: SimpleNamespace, isr: tuple[int, ...], follower_fenced: bool) -> None:
    """The metadata again, with both brokers registered and the ISR ``isr``."""
    md = host.replicas.metadata
    topic = md.topics["t"]
    registrations = tuple(PartitionRegistration((1, FOLLOWER), isr, 1, 0, 1) for _ in range(PARTITIONS))
    brokers = {n: BrokerRegistration(n, uuid.uuid4(), 5, (Endpoint("PLAINTEXT", "h", 9000 + n),),
                                     fenced=n == FOLLOWER and follower_fenced) for n in (1, FOLLOWER)}
    host.replicas.apply(ClusterMetadata("c", brokers=brokers, topics={"t": topic},
                                        partitions={topic.topic_id: registrations}))


@pytest.mark.parametrize("fenced", [True, False])
def test_only_an_eligible_follower_is_proposed_back_into_the_isr(leader: SimpleNamespace, fenced: bool) -> None:
    """The controller took a dead (fenced) broker out of every ISR: its replicas still look
    caught up here, and proposing them back (refused INELIGIBLE_REPLICA) flooded the
    controller with thousands of AlterPartition entries at failover. An unfenced one is
    proposed as before."""
    follower = _Follower(PARTITIONS)
    asyncio.run(follower.fetch(leader))
    _with_brokers(leader, (1,), follower_fenced=fenced)
    proposals = leader.replicas.isr_changes.proposals
    assert len(proposals) == (0 if fenced else PARTITIONS)
    assert all(isr == (1, FOLLOWER) for _, isr in proposals)


def test_a_refused_isr_expansion_is_proposed_again_at_the_next_session_fetch(leader: SimpleNamespace) -> None:
    """Kafka's leader proposes a caught-up follower for the ISR at every fetch; an idle
    follower in a session names nothing, so a refused proposal is retried through the
    session's watch (seen: a replica added by a reassignment never joined the ISR)."""
    follower = _Follower(PARTITIONS)
    asyncio.run(follower.fetch(leader))
    _with_brokers(leader, (1,), follower_fenced=False)
    proposals = leader.replicas.isr_changes.proposals
    assert len(proposals) == PARTITIONS
    proposals.clear()
    dropped = leader.replicas.partitions[("t", 7)]
    dropped.pending_isr = None  # the controller refused it
    leader.replicas.after_isr_change_dropped(dropped)
    asyncio.run(follower.fetch(leader, max_wait_ms=5))
    assert follower.named[-1] == 0 and proposals == [("t-7", (1, FOLLOWER))]


def test_a_session_entry_of_a_topic_created_again_since_is_not_counted_for_the_new_one(
    leader: SimpleNamespace,
) -> None:
    """A follower's session holds ``t-0`` at offset 5 of the old topic. The leader then reads
    the topic's deletion and re-creation, and appends 8 records to the new ``t-0``: the
    append touches the old entry. Counted, it would move the new partition's high
    watermark to 5, records the follower does not have (both incarnations are at leader
    epoch 0). The entry names the old topic id (Fetch v13+), so it is answered
    UNKNOWN_TOPIC_ID and counts for nothing."""
    replicas = leader.replicas
    old = replicas.metadata.topics["t"]
    lookup = SimpleNamespace(topic=lambda name: replicas.metadata.topics.get(name),
                             topic_by_id=lambda tid: replicas.metadata.topic_by_id(tid))
    follower = _Follower(1)
    _append(leader, 0, 5)
    follower.positions[("t", 0)] = (5, 0, 0, 0)

    async def fetch() -> FollowerAnswer:
        plan = follower.session.plan(dict(follower.positions), _same)
        request, _, unknown = by_name(fetch_request(13, plan, True, LIMITS, {"t": old.topic_id}), 13, lookup)
        assert not unknown
        answer = await read_for_follower(leader, request, FOLLOWER, 20)
        assert follower.session.answered(plan, answer.error_code, answer.session_id)
        return answer

    async def run() -> FollowerAnswer:
        await fetch()  # the full fetch opens the session with t-0 at 5
        assert replicas.partitions[("t", 0)].log.high_watermark == 5
        new = TopicInfo("t", uuid.uuid4(), 1)
        registration = (PartitionRegistration((1, FOLLOWER), (1, FOLLOWER), 1, 0, 0),)
        replicas.apply(ClusterMetadata("c", topics={"t": new}, partitions={new.topic_id: registration}))
        assert replicas.partitions[("t", 0)].topic_id == new.topic_id
        _append(leader, 0, 8)
        return await fetch()  # names nothing: the session's entry was touched

    answer = asyncio.run(run())
    assert [(d.partition, d.error_code) for d in answer.partitions] == [(0, ErrorCode.unknown_topic_id)]
    assert replicas.partitions[("t", 0)].log.high_watermark == 0
