"""The transaction coordinator against an in-memory __transaction_state, markers and clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.errors import ErrorCode, KafkaStorageError
from service.transactions.coordinator import TransactionCoordinator
from service.transactions.metadata import TopicPartition
from service.transactions.records import decode_txn_key, decode_txn_value, txn_partition_for
from service.transactions.seams import TxnConfig
from tests.service.groups.test_coordinator import FakeTimer

E = ErrorCode
TID = "tx-a"


@dataclass
class MemoryTxnLog:
    partitions: int = 3
    records: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    fail: bool = False
    #: appends stay local: the in-sync replicas never get them
    unreplicated: bool = False

    def ensure(self) -> int:
        return self.partitions

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        if self.fail:
            raise KafkaStorageError("disk on fire")
        self.records.append((partition, key, value))
        return len(self.records)

    async def wait_replicated(self, partition: int, end_offset: int) -> ErrorCode:
        await asyncio.sleep(0)
        return E.coordinator_not_available if self.unreplicated else E.none

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        return iter([(k, v) for p, k, v in self.records if p == partition])

    def hosted_partitions(self) -> Sequence[int]:
        return range(self.partitions)

    def states(self, tid: str = TID) -> list[int]:
        return [decode_txn_value(v).state_id for _, k, v in self.records if v and decode_txn_key(k) == tid]


@dataclass
class Markers:
    calls: list[tuple[int, int, bool, tuple[TopicPartition, ...]]] = field(default_factory=list)
    failures: dict[TopicPartition, int] = field(default_factory=dict)

    async def write_markers(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
        partitions: Sequence[TopicPartition],
    ) -> Mapping[TopicPartition, ErrorCode]:
        self.calls.append((producer_id, producer_epoch, commit, tuple(partitions)))
        out = {}
        for tp in partitions:
            if self.failures.get(tp, 0) > 0:
                self.failures[tp] -= 1
                out[tp] = E.not_leader_or_follower
            else:
                out[tp] = E.none
        return out


class Ids:
    def __init__(self) -> None:
        self.next = 1000

    async def next_producer_id(self) -> int:
        self.next += 1
        return self.next


def run(body: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
    asyncio.run(body(*args))


def make(log: MemoryTxnLog | None = None, markers: Markers | None = None, clock: FakeTimer | None = None,
         may_lead: Callable[[], bool] = lambda: True) -> tuple[TransactionCoordinator, MemoryTxnLog, Markers, FakeTimer]:
    log = log or MemoryTxnLog()
    markers = markers or Markers()
    clock = clock or FakeTimer()
    coord = TransactionCoordinator(log, markers, Ids(), clock, TxnConfig(max_timeout_ms=60_000, marker_retry_ms=1),
                                   may_lead)
    coord.startup()
    return coord, log, markers, clock


async def settle(coord: TransactionCoordinator) -> None:
    for _ in range(50):
        if not coord.completion.in_flight():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("markers still in flight")


# Kafka's state ids
EMPTY, ONGOING, PREP_COMMIT, PREP_ABORT, DONE_COMMIT, DONE_ABORT = range(6)


def test_init_gives_an_id_and_each_init_bumps_the_epoch() -> None:
    async def body() -> None:
        coord, log, _, _ = make()
        first = await coord.init_producer_id(TID, 10_000)
        assert (first.error_code, first.producer_id, first.producer_epoch) == (E.none, 1001, 0)
        second = await coord.init_producer_id(TID, 10_000)
        assert (second.producer_id, second.producer_epoch) == (1001, 1)
        assert log.states() == [EMPTY, EMPTY]
        assert {p for p, _, _ in log.records} == {txn_partition_for(TID, 3)}
        coord.shutdown()

    run(body)


def test_timeout_above_the_maximum_is_refused() -> None:
    async def body() -> None:
        coord, _, _, _ = make()
        assert (await coord.init_producer_id(TID, 60_001)).error_code == E.invalid_transaction_timeout
        assert (await coord.init_producer_id(TID, 0)).error_code == E.invalid_transaction_timeout
        assert (await coord.init_producer_id("", 1000)).error_code == E.invalid_request
        coord.shutdown()

    run(body)


def test_error_paths_of_add_and_end() -> None:
    async def body() -> None:
        coord, _, _, _ = make()
        assert await coord.end_txn("nobody", 1, 0, True) == E.invalid_producer_id_mapping
        assert coord.describe("nobody").error == E.transactional_id_not_found
        r = await coord.init_producer_id(TID, 10_000)
        assert await coord.add_partitions(TID, r.producer_id + 1, 0, [("t", 0)]) == E.invalid_producer_id_mapping
        assert await coord.add_partitions(TID, r.producer_id, 5, [("t", 0)]) == E.producer_fenced
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.invalid_txn_state  # nothing begun
        coord.shutdown()

    run(body)


def test_commit_writes_prepare_markers_then_complete() -> None:
    async def body() -> None:
        coord, log, markers, _ = make()
        r = await coord.init_producer_id(TID, 10_000)
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 0), ("t", 1)]) == E.none
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 1)]) == E.none  # already in: no write
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.none
        assert coord.describe(TID).state == "PrepareCommit"
        assert await coord.add_partitions(TID, r.producer_id, 0, [("u", 0)]) == E.concurrent_transactions
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.concurrent_transactions
        assert await coord.end_txn(TID, r.producer_id, 0, False) == E.invalid_txn_state
        await settle(coord)
        assert markers.calls == [(r.producer_id, 0, True, (("t", 0), ("t", 1)))]
        assert log.states() == [EMPTY, ONGOING, PREP_COMMIT, DONE_COMMIT]
        d = coord.describe(TID)
        assert (d.state, d.partitions) == ("CompleteCommit", ())
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.none  # a retried commit
        coord.shutdown()

    run(body)


def test_failed_markers_are_retried_until_written() -> None:
    async def body() -> None:
        coord, log, markers, _ = make(markers=Markers(failures={("t", 1): 2}))
        r = await coord.init_producer_id(TID, 10_000)
        await coord.add_partitions(TID, r.producer_id, 0, [("t", 0), ("t", 1)])
        await coord.end_txn(TID, r.producer_id, 0, False)
        await settle(coord)
        assert [c[3] for c in markers.calls] == [(("t", 0), ("t", 1)), (("t", 1),), (("t", 1),)]
        assert log.states()[-1] == DONE_ABORT
        coord.shutdown()

    run(body)


def test_a_second_producer_fences_the_first_and_aborts_its_transaction() -> None:
    async def body() -> None:
        coord, log, markers, _ = make()
        old = await coord.init_producer_id(TID, 10_000)
        await coord.add_partitions(TID, old.producer_id, 0, [("t", 0)])
        # The new producer's first InitProducerId aborts the open transaction at epoch 1.
        assert (await coord.init_producer_id(TID, 10_000)).error_code == E.concurrent_transactions
        await settle(coord)
        assert markers.calls == [(old.producer_id, 1, False, (("t", 0),))]
        new = await coord.init_producer_id(TID, 10_000)
        assert (new.error_code, new.producer_id, new.producer_epoch) == (E.none, old.producer_id, 2)
        assert await coord.end_txn(TID, old.producer_id, 0, True) == E.producer_fenced
        assert await coord.add_partitions(TID, old.producer_id, 0, [("t", 0)]) == E.producer_fenced
        assert log.states() == [EMPTY, ONGOING, PREP_ABORT, DONE_ABORT, EMPTY]
        coord.shutdown()

    run(body)


def test_a_failed_fence_write_does_not_bump_the_epoch_twice() -> None:
    async def body() -> None:
        coord, log, _, _ = make()
        r = await coord.init_producer_id(TID, 10_000)
        await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)])
        log.fail = True
        assert (await coord.init_producer_id(TID, 10_000)).error_code == E.not_coordinator
        assert (await coord.init_producer_id(TID, 10_000)).error_code == E.not_coordinator
        log.fail = False
        assert (await coord.init_producer_id(TID, 10_000)).error_code == E.concurrent_transactions
        await settle(coord)
        assert (await coord.init_producer_id(TID, 10_000)).producer_epoch == 2
        coord.shutdown()

    run(body)


def test_a_transaction_open_past_its_timeout_is_aborted_with_a_new_epoch() -> None:
    async def body() -> None:
        coord, _log, markers, clock = make()
        r = await coord.init_producer_id(TID, 5_000)
        await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)])
        clock.now += 4_000
        coord._abort_timed_out()
        await asyncio.sleep(0.01)
        assert coord.describe(TID).state == "Ongoing"
        clock.now += 2_000
        coord._abort_timed_out()
        await asyncio.sleep(0.01)
        await settle(coord)
        assert markers.calls == [(r.producer_id, 1, False, (("t", 0),))]
        assert coord.describe(TID).state == "CompleteAbort"
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.producer_fenced
        coord.shutdown()

    run(body)


def test_a_prepared_commit_found_at_load_is_completed() -> None:
    async def body() -> None:
        log = MemoryTxnLog()
        markers = Markers(failures={("t", 0): 10_000})  # the first broker never gets them out
        coord, _, _, _ = make(log, markers)
        r = await coord.init_producer_id(TID, 10_000)
        await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)])
        await coord.end_txn(TID, r.producer_id, 0, True)
        await asyncio.sleep(0.01)
        coord.shutdown()  # the broker dies with the commit prepared
        assert log.states()[-1] == PREP_COMMIT
        again, _, markers2, _ = make(log)
        await settle(again)
        assert markers2.calls == [(r.producer_id, 0, True, (("t", 0),))]
        assert log.states()[-1] == DONE_COMMIT
        assert again.describe(TID).state == "CompleteCommit"
        again.shutdown()

    run(body)


def test_unload_answers_not_coordinator() -> None:
    async def body() -> None:
        coord, _, _, _ = make()
        r = await coord.init_producer_id(TID, 10_000)
        coord.unload(txn_partition_for(TID, 3))
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)]) == E.not_coordinator
        coord.load(txn_partition_for(TID, 3), 1)
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)]) == E.none
        coord.shutdown()

    run(body)


def test_verify_only_reports_partitions_outside_the_transaction() -> None:
    async def body() -> None:
        coord, _, _, _ = make()
        r = await coord.init_producer_id(TID, 10_000)
        await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)])
        got = coord.verify_partitions(TID, r.producer_id, 0, [("t", 0), ("t", 1)])
        assert got == {("t", 0): E.none, ("t", 1): E.transaction_abortable}
        assert coord.verify_partitions(TID, r.producer_id, 3, [("t", 0)]) == {("t", 0): E.producer_fenced}
        coord.shutdown()

    run(body)


def test_list_filters_by_state_producer_and_pattern() -> None:
    async def body() -> None:
        coord, _, _, _ = make()
        a = await coord.init_producer_id("app-1", 10_000)
        await coord.init_producer_id("other", 10_000)
        await coord.add_partitions("app-1", a.producer_id, 0, [("t", 0)])
        err, unknown, found = coord.list_transactions(states=["Ongoing", "Bogus"])
        assert (err, unknown, found) == (E.none, ["Bogus"], [("app-1", a.producer_id, "Ongoing")])
        assert [t for t, _, _ in coord.list_transactions(pattern="oth.*")[2]] == ["other"]
        assert [t for t, _, _ in coord.list_transactions(producer_ids=[a.producer_id])[2]] == ["app-1"]
        assert coord.list_transactions(pattern="(")[0] == E.invalid_regular_expression
        coord.shutdown()

    run(body)


def test_expired_ids_are_tombstoned() -> None:
    async def body() -> None:
        coord, log, _, clock = make()
        await coord.init_producer_id(TID, 10_000)
        clock.now += coord.config.id_expiration_ms + 1
        coord._expire_ids()
        await asyncio.sleep(0.01)
        assert log.records[-1][2] is None
        assert coord.describe(TID).error == E.transactional_id_not_found
        coord.shutdown()

    run(body)


def test_a_commit_that_does_not_reach_the_isr_sends_no_marker_and_can_be_aborted() -> None:
    """Issue 31: a PrepareCommit the in-sync replicas never got is abandoned (Kafka's
    appendTransactionToLog), so no COMMIT marker goes out for it and the producer's abort
    is accepted, not answered INVALID_TXN_STATE."""
    async def body() -> None:
        coord, log, markers, _ = make()
        r = await coord.init_producer_id(TID, 10_000)
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)]) == E.none
        log.unreplicated = True
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.coordinator_not_available
        assert coord.describe(TID).state == "Ongoing"
        await settle(coord)
        assert markers.calls == []
        log.unreplicated = False
        assert await coord.end_txn(TID, r.producer_id, 0, False) == E.none
        await settle(coord)
        assert markers.calls == [(r.producer_id, 0, False, (("t", 0),))]
        assert coord.describe(TID).state == "CompleteAbort"
        coord.shutdown()

    run(body)


def test_an_end_txn_meanwhile_a_prepare_replicates_is_concurrent() -> None:
    async def body() -> None:
        coord, _, _, _ = make()
        r = await coord.init_producer_id(TID, 10_000)
        await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)])
        first = asyncio.ensure_future(coord.end_txn(TID, r.producer_id, 0, True))
        await asyncio.sleep(0)  # appended, waiting for the in-sync replicas
        assert await coord.end_txn(TID, r.producer_id, 0, False) == E.concurrent_transactions
        assert await first == E.none
        await settle(coord)
        assert await coord.end_txn(TID, r.producer_id, 0, True) == E.none  # a retried commit
        coord.shutdown()

    run(body)


def test_a_broker_that_cannot_confirm_it_still_leads_answers_not_coordinator() -> None:
    """Paused past its session or cut off from the bucket, the broker may have been replaced:
    its transactions are neither described nor changed from memory."""
    leads = [True]

    async def body() -> None:
        coord, _, _, _ = make(may_lead=lambda: leads[0])
        r = await coord.init_producer_id(TID, 10_000)
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 0)]) == E.none
        leads[0] = False
        assert coord.describe(TID).error == E.not_coordinator
        assert await coord.add_partitions(TID, r.producer_id, 0, [("t", 1)]) == E.not_coordinator
        assert coord.list_transactions() == (E.coordinator_load_in_progress, [], [])
        leads[0] = True
        assert coord.describe(TID).state == "Ongoing"
        assert coord.list_transactions() == (E.none, [], [(TID, r.producer_id, "Ongoing")])
        coord.shutdown()

    run(body)
