"""Coordinator writes acknowledged only once the ISR holds them: :func:`recording` and
:func:`wait_replicated`.

Kafka's group and transaction coordinators append to ``__consumer_offsets`` and
``__transaction_state`` with ``acks=all``, and a broker writes transaction
markers the same way: an OffsetCommit, an EndTxn or a WriteTxnMarkers is
answered only when every in-sync replica holds what it wrote, so a leader
failover loses none of it. Strata's coordinators are synchronous (sans-I/O):
their appends happen inside the handler's call. So the handler runs inside
:func:`recording`, every :meth:`service.broker.Broker.append` made meanwhile is
noted (:func:`note_append`, a context variable: each request's task has its
own), and :func:`wait_replicated` then waits, with ``min.insync.replicas`` as
for a producer's ``acks=all``, before the answer leaves.

Kafka answers a coordinator request whose write did not replicate with
``COORDINATOR_NOT_AVAILABLE`` (``NOT_COORDINATOR`` when the leadership moved
meanwhile); :func:`with_error` puts that code into every error field of the
response the handler built. A broker's marker answer keeps the replication
error itself (the coordinator retries the markers).

Not thread-safe: the event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from common.errors import ErrorCode, KafkaError

__all__ = ["Replicated", "note_append", "recording", "wait_replicated", "with_error"]

#: (topic, partition, end offset) of the appends made by the current request's handler
_writes: ContextVar[list[tuple[str, int, int]] | None] = ContextVar("strata_writes", default=None)


class Replicated(Protocol):
    """The broker as the barrier sees it."""

    async def wait_replicated(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None: ...


def note_append(topic: str, partition: int, end_offset: int) -> None:
    """An append ending before ``end_offset`` (called by every append; a no-op outside
    :func:`recording`)."""
    writes = _writes.get()
    if writes is not None:
        writes.append((topic, partition, end_offset))


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[str, int, int]]]:
    """Note the appends made in this block (of this task), in the list yielded."""
    writes: list[tuple[str, int, int]] = []
    token = _writes.set(writes)
    try:
        yield writes
    finally:
        _writes.reset(token)


async def wait_replicated(
    broker: Replicated, writes: list[tuple[str, int, int]], timeout_ms: int
) -> dict[tuple[str, int], KafkaError]:
    """Wait until the ISR of each written partition holds its appends; the partitions
    whose wait failed (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT,
    NOT_LEADER_OR_FOLLOWER), with why."""
    ends: dict[tuple[str, int], int] = {}
    for topic, partition, end in writes:
        ends[(topic, partition)] = max(end, ends.get((topic, partition), 0))
    failed: dict[tuple[str, int], KafkaError] = {}

    async def wait(key: tuple[str, int], end: int) -> None:
        try:
            await broker.wait_replicated(key[0], key[1], end, timeout_ms)
        except KafkaError as exc:
            failed[key] = exc

    await asyncio.gather(*(wait(key, end) for key, end in ends.items()))
    return failed


def coordinator_error(cause: KafkaError) -> ErrorCode:
    """What Kafka's coordinators answer when their write did not replicate."""
    if cause.code == ErrorCode.not_leader_or_follower:
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available


def with_error(response: Any, code: ErrorCode) -> Any:
    """``response`` (a kio entity) with every successful ``error_code`` set to ``code``
    (and its error message, where there is one, said so)."""
    if not dataclasses.is_dataclass(response) or isinstance(response, type):
        return response
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(response):
        value = getattr(response, f.name)
        if f.name == "error_code" and int(value) == 0:
            changes[f.name] = code
        elif f.name == "error_message" and int(getattr(response, "error_code", 1)) == 0:
            changes[f.name] = "the coordinator's write did not reach its in-sync replicas"
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(with_error(v, code) for v in value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[f.name] = with_error(value, code)
    return dataclasses.replace(response, **changes) if changes else response
