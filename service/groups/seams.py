"""The coordinator's seams to the outside: a clock with timers, the offsets log, the topics.

The broker plugs in asyncio's ``call_later``, its local log of
``__consumer_offsets`` and the controller's topics (:mod:`service.groups.runtime`);
the unit tests plug in a fake clock, an in-memory list and a dict of topics. Nothing else in :mod:`service.groups` does I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

__all__ = ["Cancellable", "OffsetLog", "Timer", "TopicsImage", "cancel"]


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


def cancel(handle: Any) -> None:
    """Cancel a timer handle if there is one (``None`` is no timer)."""
    if handle is not None:
        handle.cancel()
