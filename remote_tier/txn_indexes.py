"""The remote segments' transaction indexes (``.txnindex`` objects), fetched once per upload.

Thread-safe (a lock around the cache); blocking (object-store GETs): call it from
a thread, never the event loop.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

from local_tier.txn_index import AbortedTxn, TxnSearch, decode_aborted
from remote_tier.manifest import RemoteSegment
from remote_tier.storage_manager import RemoteStorageManager

__all__ = ["RemoteTxnIndexes"]

_CACHE_ENTRIES = 4096  # decoded .txnindex objects (usually a few entries each)


class RemoteTxnIndexes:
    """The remote segments' transaction indexes, fetched once per upload and kept decoded."""

    def __init__(self, rsm: RemoteStorageManager) -> None:
        self._rsm = rsm
        self._cache: OrderedDict[str, list[AbortedTxn]] = OrderedDict()
        self._lock = threading.Lock()

    def collect(self, topic_id: str | uuid.UUID, partition: int, segments: list[RemoteSegment], search: TxnSearch) -> None:
        """Blocking: add the entries of ``segments`` (in order) to ``search`` until it is complete."""
        for segment in segments:
            if search.complete:
                return
            if not segment.txn_index_bytes:
                continue
            with self._lock:
                entries = self._cache.get(segment.upload_id)
            if entries is None:
                raw = self._rsm.read_txn_index(segment, topic_id, partition)
                entries = decode_aborted(raw)
                with self._lock:
                    self._cache[segment.upload_id] = entries
                    while len(self._cache) > _CACHE_ENTRIES:
                        self._cache.popitem(last=False)
            search.add(entries)
