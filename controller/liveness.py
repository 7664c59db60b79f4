"""What the controller knows of its peers' liveness beyond heartbeats (issue #31).

* :func:`quorum_lost`: an active controller that has heard from no majority of the live
  brokers for ``controller.quorum.timeout.ms`` is the one cut off, not all of them: it
  stands down instead of fencing them (KRaft's leader does the same when it stops
  receiving fetches from a majority of voters).
* :class:`Suspects`: peers whose connection just dropped. The controller's thread probes
  each one's listener; a refused connection means no process listens there any more (a
  broker listens from before it registers or competes for the lease until it exits), so
  a dead broker is fenced, and a dead controller's lease taken over, without waiting out
  a session or a lease (``docs/adr/0009-controller-lease.md``, update of issue #31). A
  listener that still accepts is probed again a few times a moment later: a killed
  process's listener can outlive the connection that dropped (issue #33).

Thread-safe: :class:`Suspects` is filled from the event loop and drained by the
controller's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["REPROBES", "REPROBE_DELAYS_MS", "Suspects", "quorum_lost"]


def quorum_lost(
    self_id: int,
    live: Iterable[int],
    session_age_ms: Callable[[int], float | None],
    timeout_ms: float,
) -> bool:
    """Whether the controller ``self_id`` heard, within ``timeout_ms``, from no majority of
    ``live`` (the registered, unfenced brokers, itself included). Below three brokers a
    majority cannot tell a cut-off controller from dead peers, so it never is."""
    brokers = set(live) | {self_id}
    if len(brokers) < 3:
        return False
    heard = 1 + sum(
        1
        for b in brokers
        if b != self_id and (age := session_age_ms(b)) is not None and age < timeout_ms
    )
    return 2 * heard <= len(brokers)


#: a suspect whose listener still accepts is probed again this many times, this far apart:
#: a dying process's listener may outlive the connection that dropped (the kernel closes a
#: killed process's descriptors in order, and a broker that loaded 10,000 logs before it
#: listened holds its listener after all of them: seen accepting for most of a second)
#: The probes start close together and back off (about 1 s in all): the listener of a process
#: killed at 10,000 partitions was mostly gone within tens of milliseconds, and a fixed 200 ms
#: step made that race cost a failover 200 ms. At 10,000 partitions a listener still accepting
#: at the first probe refused 3 ms later, and the first re-probe at 10 ms cost that failover
#: 10 ms (stop 53): the first ones are a few milliseconds apart (a probe is one local connect).
REPROBE_DELAYS_MS = (3.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 400.0)
REPROBES = len(REPROBE_DELAYS_MS)


class Suspects:
    """Node ids whose connection dropped, to be probed on the controller's thread; one
    found still listening is probed again :data:`REPROBES` times, :data:`REPROBE_DELAYS_MS` apart."""

    def __init__(self, wake: Callable[[], None], clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        self._lock = threading.Lock()
        self._ids: set[int] = set()
        self._later: dict[int, tuple[float, int]] = {}  # node id -> (due, probes left)
        self._wake = wake
        self._clock = clock_ms

    def add(self, node_id: int) -> None:
        with self._lock:
            self._ids.add(node_id)
            self._later.pop(node_id, None)
        self._wake()

    def take(self) -> set[int]:
        """The suspects to probe now: those just added, and those due to be probed again."""
        now = self._clock()
        with self._lock:
            ids, self._ids = self._ids, set()
            ids.update(n for n, (due, _) in self._later.items() if due <= now)
        return ids

    def still_listening(self, node_id: int) -> bool:
        """The probe of ``node_id`` found its listener accepting: probe again soon (True),
        or, after the last probe, leave it to its session (False)."""
        with self._lock:
            _, left = self._later.get(node_id, (0.0, REPROBES))
            if left <= 0:
                del self._later[node_id]
                return False
            self._later[node_id] = (self._clock() + REPROBE_DELAYS_MS[REPROBES - left], left - 1)
            return True

    def settled(self, node_id: int) -> None:
        """``node_id`` was fenced (or needs no probe any more)."""
        with self._lock:
            self._later.pop(node_id, None)

    def next_due_ms(self) -> float:
        """Milliseconds until a suspect is due to be probed again (inf: none)."""
        with self._lock:
            if not self._later:
                return float("inf")
            return max(0.0, min(due for due, _ in self._later.values()) - self._clock())
