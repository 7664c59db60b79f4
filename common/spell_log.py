"""How a repeated failure is logged: at the first of a spell, then at most once per interval,
and once at its end, rather than at every try (a blind broker heartbeats ten times a second,
a starting broker reads the metadata twenty times a second)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["SpellLog"]


class SpellLog:
    """One kind of failure's spells. Not thread-safe: one caller's loop uses it."""

    def __init__(self, every_s: float, clock: Callable[[], float] | None = None) -> None:
        self.every_s = every_s
        self._clock = clock  # None: time.monotonic, looked up at each failure
        self.count = 0  # failures in the spell so far
        self._said: float | None = None  # when the spell was last logged

    def failed(self) -> bool:
        """One more failure: True when it is to be logged now (the spell's first, or
        ``every_s`` after the last one logged)."""
        self.count += 1
        now = time.monotonic() if self._clock is None else self._clock()
        if self._said is None or now - self._said >= self.every_s:
            self._said = now
            return True
        return False

    def ended(self) -> int:
        """The failure stopped: how many the spell had (0 when there was no spell), and a
        later failure starts a new spell, logged at its first."""
        count, self.count, self._said = self.count, 0, None
        return count
