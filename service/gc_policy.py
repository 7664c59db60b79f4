"""Full garbage collections stay short as a broker grows: :class:`SurvivorFreezer`.

The broker freezes what its start made (``service.app``), but partitions created later
(a create of thousands, a follower taking on a cluster's replicas) are millions of
long-lived objects that every full (generation 2) collection then walks again: at
10,000 partitions with replication factor 3 each pass held every thread for 220-280 ms,
about once a second, collected nothing, and the brokers missed heartbeats. After a
full collection slower than :data:`SLOW_S`, what it found alive is frozen (``gc.freeze``):
later passes walk only what was made since. Objects frozen that become cyclic garbage
later are not reclaimed (reference counting still frees the rest), so what a broker drops
in the normal course must not be in a reference cycle. A deleted partition's log (it was,
through its leader-epoch cache's callbacks: 4 MB lost per 1,000 partitions created and
deleted) and a closed connection (its tasks, hooks and callbacks) are freed by reference
counting alone: tests/service/replication/test_stops.py and
tests/service/network/test_accept_limits.py check it.

Thread-safe: the callback runs on whichever thread the collection ran on, with the GIL.
"""

from __future__ import annotations

import gc
import time

__all__ = ["SLOW_S", "SurvivorFreezer"]

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
