"""The coordinator's two seams to the outside: a clock with timers, and the offsets log.

The broker plugs in asyncio's ``call_later`` and its local log of
``__consumer_offsets`` (:mod:`service.groups.runtime`); the unit tests plug in
a fake clock and an in-memory list. Nothing else in :mod:`service.groups` does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

__all__ = ["Cancellable", "OffsetLog", "Timer", "cancel"]


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


def cancel(handle: Any) -> None:
    """Cancel a timer handle if there is one (``None`` is no timer)."""
    if handle is not None:
        handle.cancel()
