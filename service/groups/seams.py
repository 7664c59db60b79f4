"""The coordinator's seams to the outside: a clock with timers, the offsets log, the topics.

The broker plugs in asyncio's ``call_later``, its local log of
``__consumer_offsets`` and the controller's topics (:mod:`service.groups.runtime`);
the unit tests plug in a fake clock, an in-memory list and a dict of topics. Nothing else in :mod:`service.groups` does I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Cancellable", "NoTopics", "OffsetLog", "ReplicatedLog", "Timer", "TopicsImage", "cancel"]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    """Wall-clock time and one-shot callbacks (asyncio's ``call_later`` in the broker)."""

    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class OffsetLog(Protocol):
    """The ``__consumer_offsets`` topic, as the coordinator needs it."""

    def ensure(self) -> int:
        """Create the topic when missing; its partition count."""
        ...

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append ``(key, value)`` records (value None: tombstone) durably, or raise KafkaError."""
        ...

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every record of every partition in offset order (nothing if the topic is missing)."""
        ...


@runtime_checkable
class ReplicatedLog(Protocol):
    """An :class:`OffsetLog` whose appends are durable only once replicated (the broker's).

    An append lands in the leader's log at once; its records count only when the
    partition's in-sync replicas hold them (:mod:`service.groups.pending`). A log
    that is not one of these (the unit tests' in-memory list) is durable on append.
    """

    def end_offset(self, partition: int) -> int:
        """The offset the partition's next append gets: the last append ends before it."""
        ...

    def replicated(self, partition: int, offset: int) -> bool:
        """Whether ``min.insync.replicas`` in-sync replicas hold every offset below ``offset``
        (False too when this broker cannot tell, e.g. it no longer leads the partition)."""
        ...


class TopicsImage(Protocol):
    """The topics the consumer group protocol assigns (the controller's, in the broker).

    ``version`` changes whenever a topic is created or deleted or gains
    partitions, so a group knows when to look at its subscribed topics again.
    """

    @property
    def version(self) -> int: ...

    def by_name(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of a topic, or None."""
        ...

    def by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        """(name, partition count) of a topic, or None."""
        ...

    def names(self) -> Iterable[str]:
        """Every topic name (internal topics too)."""
        ...


class NoTopics:
    """The topics of a coordinator given none (unit tests of the classic protocol)."""

    version = 0

    def by_name(self, name: str) -> None:
        return None

    def by_id(self, topic_id: object) -> None:
        return None

    def names(self) -> tuple[str, ...]:
        return ()


def cancel(handle: Any) -> None:
    """Cancel a timer handle if there is one (``None`` is no timer)."""
    if handle is not None:
        handle.cancel()
