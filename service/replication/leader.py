"""The leader's side of a follower's Fetch: :func:`read_for_follower`.

A Fetch with ``replica_id`` >= 0 comes from a follower (Kafka's replica fetch):

* each partition is checked before anything is noted
  (:meth:`ReplicaManager.record_follower_fetch`): the leader epoch; the
  follower's last fetched epoch against this leader's history, so a follower
  whose log diverged is answered with the epoch and end offset to truncate to
  (Fetch v12 ``diverging_epoch``, KIP-320) and is neither sent records nor
  counted; a fetch offset beyond this leader's log end is
  ``OFFSET_OUT_OF_RANGE``;
* then the fetch offset, the follower's log end offset, is recorded: the high
  watermark may move (producers waiting for ``acks=all`` wake), a caught-up
  replica may be proposed for the ISR;
* records are read up to the leader's *log end offset*, not the high watermark
  (a consumer's limit), from local segments only: an offset below the leader's
  local log start answers ``OFFSET_MOVED_TO_TIERED_STORAGE`` (the follower starts
  after what the bucket holds instead, KIP-405), never a read from the bucket;
* like a consumer's, the fetch long-polls until ``min_bytes`` or ``max_wait``.

The response is encoded by the same code as a consumer's (sendfile of file
regions). Not thread-safe: the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from common.errors import ErrorCode, KafkaError
from fetch.planner import PartitionData
from fetch.waiter import AppendWaiters
from service.replication.replica_manager import FollowerFetch, ReplicaManager

__all__ = ["LeaderHost", "read_for_follower"]


class LeaderHost(Protocol):
    """What the leader's side of a follower fetch needs of the broker."""

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def waiters(self) -> AppendWaiters: ...

    @property
    def fetch_max_bytes(self) -> int: ...


def _fetches(request: Any, replica_id: int) -> list[tuple[FollowerFetch, int]]:
    """Each partition of the request, with its ``partition_max_bytes``."""
    state = getattr(request, "replica_state", None)  # v15+
    broker_epoch = int(getattr(state, "replica_epoch", -1)) if state is not None else -1
    return [
        (
            FollowerFetch(
                t.topic,
                int(p.partition),
                replica_id,
                int(p.fetch_offset),
                int(getattr(p, "current_leader_epoch", -1)),
                int(getattr(p, "last_fetched_epoch", -1)),
                int(getattr(p, "log_start_offset", -1)),
                broker_epoch,
            ),
            int(p.partition_max_bytes),
        )
        for t in request.topics
        for p in t.partitions
    ]


async def read_for_follower(
    broker: LeaderHost, request: Any, replica_id: int, max_wait_ms: int
) -> list[PartitionData]:
    """The partitions of a follower's Fetch (see the module docstring)."""
    replicas = broker.replicas
    wanted = _fetches(request, replica_id)
    # partitions answered without a read: an error, or where the follower diverged
    answered: dict[tuple[str, int], KafkaError | tuple[int, int]] = {}
    for fetch, _ in wanted:
        key = (fetch.topic, fetch.partition)
        try:
            diverging = replicas.record_follower_fetch(fetch)
        except KafkaError as exc:
            answered[key] = exc
            continue
        if diverging is not None:
            answered[key] = diverging
    max_bytes = min(int(getattr(request, "max_bytes", 2**31 - 1)), broker.fetch_max_bytes)

    def read() -> tuple[list[PartitionData], int]:
        out: list[PartitionData] = []
        total = 0
        for fetch, partition_max in wanted:
            data = PartitionData(fetch.topic, fetch.partition)
            out.append(data)
            early = answered.get((fetch.topic, fetch.partition))
            try:
                log = replicas.get_partition(fetch.topic, fetch.partition).check_leader(
                    fetch.current_leader_epoch, follower=True
                )
                data.high_watermark = log.high_watermark
                data.last_stable_offset = log.high_watermark
                data.log_start_offset = log.log_start_offset
                if isinstance(early, KafkaError):
                    raise early
                if early is not None:
                    data.diverging_epoch = early
                    continue
                offset = fetch.fetch_offset
                if offset < log.log_start_offset and log.config.remote_storage_enable:
                    data.error_code = ErrorCode.offset_moved_to_tiered_storage
                    continue
                budget = min(partition_max, max_bytes - total)
                if budget <= 0 and total > 0:
                    continue
                info = log.read(offset, max(budget, 0), max_offset=log.log_end_offset,
                                min_one_message=total == 0)
            except KafkaError as exc:
                data.error_code, data.error_message = exc.code, exc.message
                continue
            data.regions = list(info.regions)
            data.size = info.size
            total += info.size
        return out, total

    data, total = read()
    min_bytes = int(request.min_bytes)
    if not answered and total < min_bytes and max_wait_ms > 0:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        keys = [(f.topic, f.partition) for f, _ in wanted]
        while True:
            await broker.waiters.wait(keys, deadline - loop.time())
            data, total = read()
            failed = any(d.error_code != ErrorCode.none for d in data)
            if failed or total >= min_bytes or loop.time() >= deadline:
                break
    return data
