"""Fetch planning: which bytes of which partitions answer a Fetch, and when.

``planner`` reads each requested partition from its local log within the
request's byte budgets (Kafka's rules: per-partition ``max_bytes``, a response
``max_bytes`` across partitions, and the first batch of the first non-empty
partition returned whole even when larger: KIP-74). ``waiter`` parks long-poll
fetches until data arrives or ``max_wait_ms`` passes, without polling.

Remote (tiered) reads arrive with tiered storage; they will run on their own
thread pool, never on the event loop.
"""

from fetch.planner import LogSource, PartitionData, PartitionFetch, read_partitions
from fetch.waiter import AppendWaiters

__all__ = ["AppendWaiters", "LogSource", "PartitionData", "PartitionFetch", "read_partitions"]
