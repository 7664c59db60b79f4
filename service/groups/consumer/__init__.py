"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Server-side assignment, incremental reconciliation, no stop-the-world
rebalance. ``records`` is the ``__consumer_offsets`` codec of these groups,
``model`` a group as its records leave it, ``reconcile`` a member's way to its
target assignment, ``assignors`` the ``uniform`` and ``range`` assignors,
``groups`` the registry (persistence, conversions, admin reads),
``requests`` what a heartbeat asks and Kafka's checks of it, and ``heartbeat``
the heartbeat itself. :class:`service.groups.GroupCoordinator`
is the way in; see ``docs/adr/0015-consumer-group-protocol.md``.
"""

from __future__ import annotations

from service.groups.consumer.groups import ConsumerGroups, DescribedConsumerGroup, DescribedMember
from service.groups.consumer.heartbeat import Heartbeats
from service.groups.consumer.requests import ConsumerHeartbeat, HeartbeatResult

__all__ = [
    "ConsumerGroups",
    "ConsumerHeartbeat",
    "DescribedConsumerGroup",
    "DescribedMember",
    "HeartbeatResult",
    "Heartbeats",
]
