"""A controller's hold through a bucket outage every broker sees: :class:`OutageHold`.

ADR 0031. When the bucket stops answering, the controller cannot renew its lease and
stops acting at its deadline; before this, every other broker then stopped leading a
session later, although nobody could have been elected in their place. The hold keeps
the cluster as it is instead, for as long as it can prove nobody else acts:

* Every broker whose reads of the lease fail reports so to the controller, echoing a
  token from the controller's previous answer. That answer was sent before the report,
  and the broker's failing reads (two in a row, or one long in flight) restarted its
  takeover wait (:attr:`ControllerLease.read_failing`):
  it cannot take the lease over until a whole lease (``T + skew``) after a later read
  succeeds. So the report counts for ``3T / 8`` from the token's issue
  (:attr:`LeaseTimings.hold_report_ms`).
* The controller holds while every registered, unfenced broker but itself has a report
  that still counts, its lease ran out with nothing but unanswered requests
  (:attr:`ControllerLease.lapsed_at`), no metadata write of its is in doubt, and for at
  most ``controller.bucket.outage.hold.ms`` after the lapse. A broker that is not
  registered and unfenced waits that much, and a grant, more before it takes a lease over.
* A broker told "hold" may go on leading while it cannot read the metadata for
  ``3T / 8`` after it sent that request (:attr:`LeaseTimings.hold_grant_ms`); the
  controller moves no leadership before the last such grant has run out (:attr:`promised_until`),
  and neither does a node that took the lease soon after reporting to it, or a restarted one.

Safe because ``3T / 8 + 3T / 8 < T + skew``: once a broker reads the bucket again, the
controller answers "hold" no more than ``3T / 8`` after the token that broker last echoed,
and any grant a broker still relies on ends ``3T / 8`` after that answer, a quarter of a
lease before that broker can take the lease over.

Thread-safe without a lock: dict and float updates under the GIL; the answers run on
the event loop, the checks on the controller's threads.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable

from controller.lease_record import LeaseTimings

__all__ = ["OutageHold"]

#: tokens remembered: 8,192 answers, seconds of reports from a thousand brokers, far more
#: than a report counts for (it is the answer's time that decides, not this)
TOKENS_KEPT = 8192


class OutageHold:
    """The reports, tokens and promises of a hold (see the module docstring)."""

    def __init__(self, timings: LeaseTimings, monotonic: Callable[[], float]) -> None:
        self._timings = timings
        self._monotonic = monotonic
        # tokens this process handed out, with when (a token from any other process,
        # or one too old to count, is unknown and counts for nothing)
        self._tokens = itertools.count(random.getrandbits(48) + 1)
        self._issued: dict[int, float] = {}
        # node id -> when the token its latest report echoed was handed out
        self._reports: dict[int, float] = {}
        #: no leadership moves before this monotonic instant (a grant may still be relied on)
        self.promised_until = 0.0

    @property
    def enabled(self) -> bool:
        return self._timings.outage_hold_max_ms > 0

    def token(self) -> int:
        """A token for an answer sent now."""
        token = next(self._tokens)  # (each step here is one atomic operation)
        self._issued[token] = self._monotonic()
        self._issued.pop(token - TOKENS_KEPT, None)
        return token

    def report(self, node_id: int, token: int) -> None:
        """``node_id`` cannot read the lease, and says so echoing ``token``."""
        issued = self._issued.get(token)
        if issued is not None and issued > self._reports.get(node_id, float("-inf")):
            self._reports[node_id] = issued

    def remaining_ms(self, lapsed_at: float | None, in_doubt: bool, others: Iterable[int]) -> float:
        """How much longer the hold lasts (0: none): ``lapsed_at`` the instant the lease ran
        out unanswered (None: it did not), ``in_doubt`` a metadata write of unknown outcome,
        ``others`` every registered, unfenced broker but this controller's own."""
        if lapsed_at is None or in_doubt or not self.enabled:
            return 0.0
        until = lapsed_at + self._timings.outage_hold_max_ms
        for node_id in others:
            reported = self._reports.get(node_id)
            if reported is None:
                return 0.0
            until = min(until, reported + self._timings.hold_report_ms)
        return max(0.0, until - self._monotonic())

    def grant(self) -> None:
        """An answer "hold" is being sent: its broker may rely on it for ``3T / 8`` from
        before it asked, so no leadership moves for that long from now."""
        self.promise_until(self._monotonic() + self._timings.hold_grant_ms)

    def promise_until(self, instant: float) -> None:
        """No leadership moves before ``instant`` (monotonic ms)."""
        self.promised_until = max(self.promised_until, instant)
