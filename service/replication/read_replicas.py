"""Consumers reading from a replica in their rack (KIP-392): :func:`select_read_replicas`
and :class:`ConsumerLogs`.

With ``replica.selector.class`` set to Kafka's ``RackAwareReplicaSelector``, a
consumer's Fetch (v11+, with the ``rack_id`` it takes from ``client.rack``)
reaching a partition's leader is answered, for each partition whose leader is
in another rack than the consumer, with no records and the id of an in-sync
replica in the consumer's rack that already holds the fetch offset (the most
caught up of them); the consumer then fetches from that replica
(``preferred_read_replica``). A leader in the consumer's rack keeps serving it.

A follower serves a consumer's v11+ Fetch from its own log, up to its own high
watermark (the leader's, as of its last fetch) and last stable offset; an
offset below its local log start (history it would read from the bucket)
answers NOT_LEADER_OR_FOLLOWER, and the consumer returns to the leader.

Not thread-safe: the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from common.errors import NotLeaderOrFollowerError
from fetch.planner import PartitionData, PartitionFetch
from local_tier.log import Log
from service.replication.replica_manager import ReplicaManager

__all__ = ["RACK_AWARE_SELECTOR", "ConsumerLogs", "select_read_replicas"]

#: the ``replica.selector.class`` value that turns KIP-392 on (Kafka's class name)
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


class ConsumerLogs:
    """The planner's :class:`fetch.planner.LogSource` for a consumer that may read from a
    follower (Fetch v11+): leaders' logs as usual, followers' above their local start."""

    def __init__(self, replicas: ReplicaManager, offsets: dict[tuple[str, int], int]) -> None:
        self._replicas = replicas
        self._offsets = offsets

    def log_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        hosted = self._replicas.get_partition(topic, partition)
        log = hosted.check_leader(current_leader_epoch, require_leader=False)
        if not hosted.is_leader and self._offsets.get((topic, partition), 0) < log.log_start_offset:
            raise NotLeaderOrFollowerError(
                f"{hosted.name}: offset {self._offsets.get((topic, partition))} is below this "
                f"follower's local log start {log.log_start_offset}; fetch it from the leader"
            )
        return log


def select_read_replicas(
    replicas: ReplicaManager,
    wanted: Sequence[PartitionFetch],
    data: Sequence[PartitionData],
    client_rack: str,
    rack_of: Callable[[int], str | None],
) -> None:
    """For each partition this broker leads from outside ``client_rack``, send the consumer
    to an in-sync replica in its rack that holds the fetch offset (module docstring):
    ``preferred_read_replica`` set, the records dropped."""
    if not client_rack:
        return
    for req, out in zip(wanted, data, strict=True):
        partition = replicas.partition(req.topic, req.partition)
        if partition is None or not partition.is_leader or out.error_code != 0:
            continue
        if rack_of(partition.local_id) == client_rack:
            continue
        best: tuple[int, int] | None = None  # (log end offset, replica)
        for replica, state in partition.followers.items():
            if (
                replica in partition.isr
                and rack_of(replica) == client_rack
                and state.log_start_offset <= req.fetch_offset <= state.log_end_offset
                and (best is None or state.log_end_offset > best[0])
            ):
                best = (state.log_end_offset, replica)
        if best is not None:
            out.preferred_read_replica = best[1]
            out.regions, out.size, out.records, out.remote, out.aborted = [], 0, 0, None, []
