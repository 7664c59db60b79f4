"""What the controller knows of its peers' liveness beyond heartbeats (issue #31).

* :func:`quorum_lost`: an active controller that has heard from no majority of the live
  brokers for ``controller.quorum.timeout.ms`` is the one cut off, not all of them: it
  stands down instead of fencing them (KRaft's leader does the same when it stops
  receiving fetches from a majority of voters).
* :class:`Suspects`: peers whose connection just dropped. The controller's thread probes
  each one's listener; a refused connection means no process listens there any more (a
  broker listens from before it registers or competes for the lease until it exits), so
  a dead broker is fenced, and a dead controller's lease taken over, without waiting out
  a session or a lease (``docs/adr/0009-controller-lease.md``, update of issue #31).

Thread-safe: :class:`Suspects` is filled from the event loop and drained by the
controller's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

__all__ = ["Suspects", "quorum_lost"]


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


class Suspects:
    """Node ids whose connection dropped, to be probed on the controller's thread."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._ids: set[int] = set()
        self._wake = wake

    def add(self, node_id: int) -> None:
        with self._lock:
            self._ids.add(node_id)
        self._wake()

    def take(self) -> set[int]:
        with self._lock:
            ids, self._ids = self._ids, set()
        return ids
