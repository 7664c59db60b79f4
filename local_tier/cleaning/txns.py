"""Transactions while cleaning: Kafka's ``CleanedTransactionMetadata``.

As the cleaner walks a log in offset order it learns, from the aborted
transactions of the live ``.txnindex`` files (:meth:`add_aborted`), which
producer's transactional batches belong to an aborted transaction: those may go
(``on_batch_read`` answers True). A COMMIT marker may go once no batch of its
transaction was seen in this pass (its data is gone); an ABORT marker only once
no batch of its transaction remained to be seen, and until then its index entry
is written again into the cleaned segment's ``.txnindex`` (``cleaned_index``).
Markers that may go are still kept until their batch's delete horizon passes
(the caller's rule, as for tombstones), so a consumer that read the aborted
data before it was cleaned still meets the marker.

Not thread-safe: one per cleaning pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from common.record.batch import BatchHeader
from common.record.control import ControlType
from local_tier.txn_index import AbortedTxn

__all__ = ["CleanedTransactions"]


@dataclass(slots=True)
class _Aborted:
    txn: AbortedTxn
    seen_batch: bool = False


class CleanedTransactions:
    """The transaction state of one pass (see the module docstring)."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0
        self._committed: set[int] = set()
        self._aborted: dict[int, _Aborted] = {}
        #: where retained ABORT entries go (the cleaned segment's index); None: nowhere
        self.cleaned_index: Callable[[AbortedTxn], None] | None = None

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._pending, (txn.first_offset, self._seq, txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            txn = heapq.heappop(self._pending)[2]
            self._aborted.setdefault(txn.producer_id, _Aborted(txn))

    def on_control_batch_read(self, header: BatchHeader, marker: int | None) -> bool:
        """A control batch (``marker``: its record's control type, 0 ABORT, 1 COMMIT;
        None when it has no record). True when the batch may be discarded."""
        self._consume_up_to(header.last_offset)
        if marker is None:
            return True  # an empty control batch: its transaction was cleaned already
        pid = header.producer_id
        if marker == ControlType.ABORT:
            aborted = self._aborted.pop(pid, None)
            if aborted is not None and aborted.seen_batch:
                if self.cleaned_index is not None:
                    self.cleaned_index(aborted.txn)
                return False
            return True
        if marker == ControlType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch; True when it belongs to an aborted transaction (it may go)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborted.get(header.producer_id)
        if aborted is not None:
            aborted.seen_batch = True
            return True
        self._committed.add(header.producer_id)
        return False
