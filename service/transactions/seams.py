"""The transaction coordinator's seams: its state log, the partitions it writes markers to, ids.

Narrow on purpose (issue #16 moves coordinators with partition leadership):
the coordinator reads and appends one ``__transaction_state`` partition at a
time through :class:`TxnStateLog`, and reaches the data partitions of a
transaction only through :class:`MarkerWriter`, which the single-node broker
implements with its local ``write_txn_markers`` and a later cluster phase with
WriteTxnMarkers requests to each partition's leader. :mod:`.runtime` plugs the
broker in; the unit tests plug in memory. The clock and timers are
:class:`service.groups.seams.Timer`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from common.config import broker_default_int
from common.errors import ErrorCode
from service.transactions.metadata import TopicPartition

__all__ = ["MarkerWriter", "ProducerIds", "TxnConfig", "TxnStateLog"]


class TxnStateLog(Protocol):
    """``__transaction_state``, one partition at a time."""

    def ensure(self) -> int:
        """Create the topic when missing; its partition count."""
        ...

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Append one record to the local log (value None: tombstone), or raise KafkaError;
        the offset after it."""
        ...

    async def wait_replicated(self, partition: int, end_offset: int) -> ErrorCode:
        """Wait until the partition's in-sync replicas hold the log below ``end_offset``:
        NONE, or the coordinator error Kafka answers when they do not in time
        (COORDINATOR_NOT_AVAILABLE; NOT_COORDINATOR when the leadership moved)."""
        ...

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every record of ``partition`` in offset order (nothing if it does not exist here),
        as the log is when called: the iterator may then be read on a worker thread."""
        ...

    def hosted_partitions(self) -> Sequence[int]:
        """The partitions of the topic this broker leads (all of them, single node)."""
        ...


class MarkerWriter(Protocol):
    """Writes COMMIT/ABORT control batches into the partitions of one transaction."""

    def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Sequence[TopicPartition],
    ) -> Awaitable[Mapping[TopicPartition, ErrorCode]]:
        """One error code per partition (NONE: the marker is in that partition's log)."""
        ...


class ProducerIds(Protocol):
    """Producer ids from the same durable blocks as idempotent producers' (never reused)."""

    async def next_producer_id(self) -> int:
        """A fresh id, or raise KafkaError when no block can be had."""
        ...


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker configs of the coordinator (their defaults from common/config/keys.py)."""

    max_timeout_ms: int = broker_default_int("transaction.max.timeout.ms")
    abort_interval_ms: int = broker_default_int("transaction.abort.timed.out.transaction.cleanup.interval.ms")
    id_expiration_ms: int = broker_default_int("transactional.id.expiration.ms")
    expiration_interval_ms: int = broker_default_int("transaction.remove.expired.transaction.cleanup.interval.ms")
    #: transaction.markers.delay.ms (Strata, tests only): wait before writing markers
    markers_delay_ms: int = broker_default_int("transaction.markers.delay.ms")
    #: first pause between tries when a marker cannot be written; it doubles per try
    marker_retry_ms: int = 100
    #: the longest pause between tries of a marker
    marker_retry_max_ms: int = 2000
