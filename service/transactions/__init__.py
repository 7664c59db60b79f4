"""The transaction coordinator and its ``__transaction_state`` topic (Kafka's, byte for byte).

``coordinator`` is the one object the broker and the handlers talk to (sans
I/O apart from the marker tasks); ``metadata`` the per-transactional-id model
and its legal transitions, ``state`` the loaded ``__transaction_state``
partitions and every write to them, ``completion`` the second phase (markers,
then Complete*) and the timers, ``records`` the record codec, ``seams`` the log,
marker writer and producer-id source it needs, and ``runtime`` plugs the broker
into those seams. See ``docs/adr/0013-transaction-coordinator.md``.
"""

from __future__ import annotations

from service.transactions.coordinator import TransactionCoordinator, TxnDescription
from service.transactions.records import TRANSACTION_STATE_TOPIC
from service.transactions.runtime import start_transaction_coordinator

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TransactionCoordinator",
    "TxnDescription",
    "start_transaction_coordinator",
]
