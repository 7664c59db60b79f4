"""A request naming many partitions of a topic just created does not create all their logs in
one turn of the loop (service/replication/replica_manager.py, ``_OpensOnUse``).

A producer's first request to a new 500-partition topic names every partition. Before, each
partition the apply's slices had not reached yet had its log created for that request, at once:
a directory and four files each, 1-4 ms on a real disk, so the loop was held up to 2.7 s
(``bench/create_stall.py``). Now such creates take at most ``OPEN_SLICE_S``
of a turn; the partitions past it answer NOT_LEADER_OR_FOLLOWER (clients retry) until a slice,
or a request in a later turn, opens them. A takeover's partitions, whose logs exist, are still
all taken by the request that names them (test_apply_plan.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from common.errors import NotLeaderOrFollowerError
from controller.document import ClusterMetadata
from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, Endpoint, PartitionRegistration
from fetch.waiter import AppendWaiters
from local_tier.manager import LogManager
from service.replication import replica_manager as rm
from tests.local_tier.batches import small_config

PARTITIONS = 400  # all led by broker 1: more than TAKE_ON_USE, so none is taken at the apply
OPEN_S = 0.002  # each log's creation, slowed to what a busy disk costs


def _metadata() -> ClusterMetadata:
    brokers = {1: BrokerRegistration(1, uuid.UUID(int=1), 1, (Endpoint("PLAINTEXT", "h", 9001),), fenced=False)}
    topic = TopicInfo("created", uuid.UUID(int=7), PARTITIONS)
    regs = tuple(PartitionRegistration((1,), (1,), 1, 0, 0) for _ in range(PARTITIONS))
    return ClusterMetadata("c", revision=5, brokers=brokers, topics={"created": topic},
                           partitions={topic.topic_id: regs})


def _slow_creates(monkeypatch: pytest.MonkeyPatch) -> None:
    create = LogManager.get_or_create_log

    def slow(self: LogManager, topic: str, partition: int, config: Any) -> Any:
        if self.get_log(topic, partition) is None:
            time.sleep(OPEN_S)
        return create(self, topic, partition, config)

    monkeypatch.setattr(LogManager, "get_or_create_log", slow)


def test_a_request_naming_every_new_partition_creates_logs_for_one_budget_of_the_turn_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _slow_creates(monkeypatch)
    logs = LogManager(tmp_path / "logs")
    logs.load(lambda _topic: small_config())
    manager = rm.ReplicaManager(1, logs, lambda _topic: small_config(), AppendWaiters())

    def request_for_all() -> tuple[list[int], list[int], float]:
        """One request's synchronous pass over every partition, as Produce's checks make it."""
        served, refused, started = [], [], time.monotonic()
        for p in range(PARTITIONS):
            try:
                manager.leader_log("created", p)
                served.append(p)
            except NotLeaderOrFollowerError:
                refused.append(p)
        return served, refused, time.monotonic() - started

    async def run() -> None:
        manager.apply(_metadata())
        assert len(manager._pending) == PARTITIONS  # in bulk: the slices have not run yet
        served, refused, held = request_for_all()
        # at most the budget's worth of creates (plus the one that crossed it), the rest refused
        assert 1 <= len(served) <= rm.OPEN_SLICE_S / OPEN_S + 2, len(served)
        assert refused and len(served) + len(refused) == PARTITIONS
        assert held < 0.4, held  # all 400 took 0.8 s and more (one create on a busy disk: up to 0.1 s)
        await asyncio.sleep(0)  # the next turn: a request may create again
        again, _, _ = request_for_all()
        assert len(again) > len(served)
        for _ in range(2000):  # the slices open the rest
            if not manager._pending:
                break
            await asyncio.sleep(0.005)
        served, refused, _ = request_for_all()
        assert refused == [] and len(served) == PARTITIONS

    try:
        asyncio.run(run())
    finally:
        logs.shutdown()


def test_partitions_whose_logs_exist_are_all_taken_by_the_request_that_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart: every log is on disk and loaded, so a request takes them all (no create)."""
    first = LogManager(tmp_path / "logs")
    first.load(lambda _topic: small_config())
    rm.ReplicaManager(1, first, lambda _topic: small_config(), AppendWaiters()).apply(_metadata())  # no loop: all at once
    first.shutdown()
    _slow_creates(monkeypatch)
    logs = LogManager(tmp_path / "logs")
    logs.load(lambda _topic: small_config())
    manager = rm.ReplicaManager(1, logs, lambda _topic: small_config(), AppendWaiters())

    async def run() -> None:
        manager.apply(_metadata())
        assert len(manager._pending) == PARTITIONS
        for p in range(PARTITIONS):
            manager.leader_log("created", p)  # raises NOT_LEADER_OR_FOLLOWER if one was left

    try:
        asyncio.run(run())
    finally:
        logs.shutdown()
