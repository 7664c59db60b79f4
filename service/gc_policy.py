"""Full garbage collections stay short as a broker grows: :class:`SurvivorFreezer`.

The broker freezes what its start made (``service.app``), but partitions created later
(a create of thousands, a follower taking on a cluster's replicas) are millions of
long-lived objects that every full (generation 2) collection then walks again: at
10,000 partitions with replication factor 3 each pass held every thread for 220-280 ms,
about once a second, collected nothing, and the brokers missed heartbeats. After a
full collection slower than :data:`SLOW_S`, what it found alive is frozen (``gc.freeze``):
later passes walk only what was made since. Objects frozen that become cyclic garbage
later are not reclaimed (reference counting still frees the rest); a broker's long-lived
objects (logs, partitions, their indexes) are not cyclic garbage in normal running.

A slow full collection is paid once before its freeze: after a create of 600 partitions one
held every thread 71 ms and collected nothing. So where the broker knows it has just made
many long-lived objects (an apply that opened many logs), it freezes them at once
(:func:`freeze_long_lived`); a freeze moves lists, it walks no object.

Thread-safe: the callback runs on whichever thread the collection ran on, with the GIL.
"""

from __future__ import annotations

import gc
import time

__all__ = ["SLOW_S", "SurvivorFreezer", "freeze_long_lived"]

#: a full collection slower than this freezes its survivors
SLOW_S = 0.02


class SurvivorFreezer:
    """A ``gc.callbacks`` entry (see the module docstring); ``freezes`` counts its freezes."""

    def __init__(self, slow_s: float = SLOW_S) -> None:
        self.slow_s = slow_s
        self.freezes = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if info.get("generation") == 2 and time.perf_counter() - self._started > self.slow_s:
            gc.freeze()  # the pass just ended: what it left is alive, and stays out of the next
            self.freezes += 1

    def install(self) -> SurvivorFreezer:
        if self not in gc.callbacks:
            gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


def freeze_long_lived() -> None:
    """Leave every object the collector tracks now out of the next full collections (module
    docstring): what was made since the last freeze is mostly what the caller just made to
    keep; cyclic garbage among it is never reclaimed."""
    gc.freeze()
