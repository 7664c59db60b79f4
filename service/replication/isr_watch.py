"""Which led partitions the ISR check looks at: :class:`IsrWatch`.

Kafka's ``maybeShrinkIsr`` looks at every led partition every ``replica.lag.time.max.ms`` / 2.
A follower can fall out of sync only while it is short of the leader's log end, and it
becomes so only after an append on the leader, a fetch of its own from behind the log end,
or a change of leadership or ISR. The watch holds the partitions where one of those
happened; the check drops those it finds caught up. On a broker whose partitions are idle
the check then looks at none: at 10,000 led partitions it read every one of them every 15 s.

Not thread-safe: the event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from service.replication.partition import Partition

__all__ = ["IsrWatch"]

_log = logging.getLogger("strata.replication")

TopicPartition = tuple[str, int]


class IsrWatch:
    """The led partitions whose ISR may hold a follower short of the log end."""

    def __init__(self) -> None:
        self._watched: dict[TopicPartition, Partition] = {}

    def __len__(self) -> int:
        return len(self._watched)

    def add(self, partition: Partition) -> None:
        """A follower in the ISR of ``partition`` may be short of its log end now (no-op unless
        this broker leads it with followers in the ISR)."""
        if partition.is_leader and len(partition.isr) > 1:
            self._watched[(partition.topic, partition.index)] = partition

    def shrink(
        self, hosted: Mapping[TopicPartition, Partition],
        submit: Callable[[Partition, tuple[int, ...]], None], now_ms: float, max_lag_ms: int,
    ) -> int:
        """Propose (``submit``), for each watched partition still led here (``hosted``), the ISR
        without the members that have not caught up for ``max_lag_ms``; those no longer led,
        or caught up, leave the watch. Returns how many partitions it proposed for."""
        asked = 0
        for key, partition in list(self._watched.items()):
            if hosted.get(key) is not partition or not partition.is_leader:
                del self._watched[key]
                continue
            lagging = partition.out_of_sync(now_ms, max_lag_ms)
            if not lagging:
                if partition.caught_up():
                    del self._watched[key]
                continue
            new_isr = tuple(r for r in partition.isr if r not in lagging)
            # pending: the maximal ISR stays the committed one until the answer
            partition.pending_isr = new_isr
            _log.debug("%s: asking to drop %s from the ISR %s (no catch-up for %d ms)",
                       partition.name, lagging, list(partition.isr), max_lag_ms)
            submit(partition, new_isr)
            asked += 1
        return asked
