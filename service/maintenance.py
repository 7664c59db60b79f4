"""The broker's periodic work, like Kafka's log manager and replica manager schedules:
:func:`run_maintenance`.

Each job runs at its own interval, on the event loop, from one loop that wakes
at the shortest of them (at least every second): retention, flushes, the
recovery-point and log-start checkpoints, the high-watermark checkpoint
(``replica.high.watermark.checkpoint.interval.ms``), expired producer ids, the
partitions whose log could not be opened, and the ISR check of the partitions this broker leads (every
``replica.lag.time.max.ms`` / 2, as Kafka). A job that fails is logged and the
others go on.

Not thread-safe: the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from common.config.broker import BrokerConfig
from local_tier.manager import LogManager
from remote_tier.log_manager import RemoteLogManager
from service.replication.replica_manager import ReplicaManager

__all__ = ["MaintenanceHost", "run_maintenance"]

log = logging.getLogger("strata.broker")

#: how often the partitions whose log could not be opened (a full disk) are tried again
_OFFLINE_RETRY_S = 5.0


class MaintenanceHost(Protocol):
    """What the schedules act on (:class:`service.broker.Broker` has it)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def tiering(self) -> RemoteLogManager: ...

    def restore_reserve(self) -> None: ...


@dataclass(slots=True)
class _Job:
    name: str
    interval_s: float
    run: Callable[[int], object]  # wall-clock now, in ms; its result is ignored
    due: float = 0.0


def _jobs(broker: MaintenanceHost) -> list[_Job]:
    config = broker.config
    logs = broker.logs

    def seconds(key: str) -> float:
        return config.get_int(key) / 1000

    def retention(now_ms: int) -> None:
        if deleted := logs.run_retention(now_ms, broker.tiering.remote_boundary):
            log.info("retention deleted %d segment(s)", deleted)
            broker.restore_reserve()

    def expiry(now_ms: int) -> None:
        if expired := logs.remove_expired_producers(now_ms):
            log.info("forgot %d expired producer id(s)", expired)

    max_lag_ms = config.get_int("replica.lag.time.max.ms")
    return [
        _Job("ISR check", max_lag_ms / 2000, lambda _: broker.replicas.shrink_isrs(max_lag_ms)),
        _Job("retention", seconds("log.retention.check.interval.ms"), retention),
        _Job("flush", seconds("log.flush.scheduler.interval.ms"), logs.run_flush),
        _Job("checkpoints", seconds("log.flush.offset.checkpoint.interval.ms"),
             lambda _: logs.checkpoint()),
        _Job("high watermark checkpoint", seconds("replica.high.watermark.checkpoint.interval.ms"),
             lambda _: logs.checkpoint_high_watermarks()),
        _Job("producer id expiry", seconds("producer.id.expiration.check.interval.ms"), expiry),
        _Job("offline partitions", _OFFLINE_RETRY_S, lambda _: broker.replicas.retry_offline()),
    ]


async def run_maintenance(broker: MaintenanceHost) -> None:
    """Run every job when due, until cancelled."""
    jobs = _jobs(broker)
    tick = max(0.05, min(1.0, *(job.interval_s for job in jobs)))
    start = time.monotonic()
    for job in jobs:
        job.due = start
    while True:
        await asyncio.sleep(tick)
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        for job in jobs:
            if now < job.due:
                continue
            job.due = now + job.interval_s
            try:
                job.run(now_ms)
            except Exception:  # a failing schedule must not stop the others
                log.exception("background %s failed", job.name)
