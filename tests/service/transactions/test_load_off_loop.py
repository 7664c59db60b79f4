"""A coordinator taking a ``__transaction_state`` partition over reads it on a worker thread
(:meth:`TransactionCoordinator.load_off_loop`): its ids answer COORDINATOR_LOAD_IN_PROGRESS
until the state is in, the event loop keeps running meanwhile, and a load the leadership
moved on from installs nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from common.errors import ErrorCode as E
from service.transactions.records import txn_partition_for
from tests.service.transactions.test_coordinator import TID, MemoryTxnLog, make, run


class GatedLog(MemoryTxnLog):
    """Once ``gated``, its replay waits for ``gate`` and notes the thread it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.gated = False
        self.gate = threading.Event()
        self.replayed_on: list[str] = []

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        records = list(super().replay(partition))  # the log as it is now, taken on the loop
        if not self.gated:
            return iter(records)

        def read() -> Iterator[tuple[bytes, bytes | None]]:
            self.replayed_on.append(threading.current_thread().name)
            assert self.gate.wait(5)
            yield from records

        return read()


def test_a_taken_over_partition_loads_off_the_loop_and_answers_load_in_progress_meanwhile() -> None:
    async def body() -> None:
        log = GatedLog()
        coord, _, _, _ = make(log)
        first = await coord.init_producer_id(TID, 10_000)
        assert first.error_code == E.none
        partition = txn_partition_for(TID, 3)
        coord.unload(partition)

        log.gated = True
        load = asyncio.ensure_future(coord.load_off_loop(partition, 7))
        await asyncio.sleep(0.05)  # the loop runs while the replay waits on its thread
        assert log.replayed_on and log.replayed_on[0] != threading.current_thread().name
        during = await coord.init_producer_id(TID, 10_000)
        assert during.error_code == E.coordinator_load_in_progress
        log.gate.set()
        await load
        again = await coord.init_producer_id(TID, 10_000)
        assert (again.error_code, again.producer_id, again.producer_epoch) == (E.none, first.producer_id, 1)
        assert coord.store.partitions[partition].coordinator_epoch == 7
        coord.shutdown()

    run(body)


def test_a_load_the_leadership_moved_on_from_installs_nothing() -> None:
    async def body() -> None:
        log = GatedLog()
        coord, _, _, _ = make(log)
        assert (await coord.init_producer_id(TID, 10_000)).error_code == E.none
        partition = txn_partition_for(TID, 3)
        log.gated = True
        load = asyncio.ensure_future(coord.load_off_loop(partition, 7))
        await asyncio.sleep(0.02)
        coord.unload(partition)  # another broker leads it now
        log.gate.set()
        await load
        assert partition not in coord.store.partitions
        assert (await coord.init_producer_id(TID, 10_000)).error_code == E.not_coordinator
        coord.shutdown()

    run(body)
