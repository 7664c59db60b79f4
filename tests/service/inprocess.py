"""Helpers for tests that run a :class:`service.broker.Broker` in process."""

from __future__ import annotations

import asyncio
from typing import Any


async def created(broker: Any, topic: str, partitions: int, timeout_s: float = 10.0) -> None:
    """Wait until every partition of ``topic`` has its log on ``broker``. A request creates
    at most 20 ms of logs per turn of the loop on use (ReplicaManager's ``_OpensOnUse``), and
    answers NOT_LEADER_OR_FOLLOWER for the rest; a test that is not about that waits here."""
    for _ in range(int(timeout_s / 0.01)):
        if all((topic, p) in broker.replicas.partitions for p in range(partitions)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic}'s {partitions} partitions were not all open after {timeout_s} s")
