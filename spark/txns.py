"""Transactions in the bucket, for ``kafka.isolation.level=read_committed`` reads (planning).

Format version 2 of the layout (``docs/object-layout.md``, "Transactions") lists
per segment the size of its ``.txnindex`` (Kafka's transaction index: one
34-byte entry per transaction whose ABORT marker is in that segment) and of its
``.snapshot`` (the producer state at the segment's end, ADR 0011). Planning
uses them for two things:

* **The stable end of the bucket.** A segment is uploaded once no transaction is
  open in it, but a transaction may end in a segment that is still only on the
  broker. Its records in the bucket are then of unknown fate to a reader of the
  bucket. The producer snapshot at the end of the last listed segment names
  those transactions (producers with an open transaction, and its first offset);
  the smallest first offset is the bucket's own last stable offset. A
  read_committed read takes from the bucket only the offsets below it, as a
  Kafka consumer reads only below the LSO; past it, the broker (with
  ``kafka.bootstrap.servers``) serves the rest. A last segment without a
  snapshot (uploaded by an older broker, or its snapshot lost in a crash) is
  replayed from the newest snapshot, batch headers only.
* **The aborted transactions of a range** ``[lo, hi)``: Kafka's rule
  (``collectAbortedTxns``) over the indexes of the segments from the one holding
  ``lo`` onwards: entries with ``last_offset >= lo`` and ``first_offset < hi``,
  stopping at an entry whose ``last_stable_offset >= hi``. Segments whose
  ``txn_index_bytes`` is 0 have none and cost no GET, so a topic without
  aborted transactions reads no index at all.

The parsers share no code with the broker's writers (the layout is a public
contract, read here independently). Objects are named by upload id and never
change, so what was read is kept per process: a stream's planning runs in one
long-lived Python worker, and each micro-batch reads only indexes it has not
seen. Thread-safe (one lock around the cache).
"""

from __future__ import annotations

import functools
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

import crc32c

from spark.bucket import Bucket
from spark.options import StrataSourceError
from spark.segments import AbortedTxn, SegmentRef, transaction_batches

__all__ = ["BucketTxns", "overlapping", "parse_open_transactions", "parse_txn_index"]

#: a .txnindex entry: version int16 (0), producer id, first offset, last offset, LSO at completion
_TXN_ENTRY = struct.Struct(">hqqqq")
#: producer snapshot (ADR 0011): version int16 (2), CRC-32C uint32, entry count int32
_SNAPSHOT_HEAD = struct.Struct(">hIi")
#: producer id, epoch, coordinator epoch, last timestamp, open transaction's first offset, batches
_SNAPSHOT_ENTRY = struct.Struct(">qhiqqb")
_SNAPSHOT_BATCH_BYTES = 24
_SNAPSHOT_VERSION = 2
_CACHE_ENTRIES = 4096

#: a segment's effect on the open transactions: producer id → first offset of the transaction
#: it leaves open (None: it ends the producer's transaction), and producer id → first offset of
#: a transaction it opens without any marker of that producer in the segment
_Effect = tuple[dict[int, int | None], dict[int, int]]
_T = TypeVar("_T")


def parse_txn_index(raw: bytes, key: str) -> list[tuple[int, int, int, int]]:
    """(producer id, first offset, last offset, last stable offset) of each entry of a ``.txnindex``."""
    if len(raw) % _TXN_ENTRY.size:
        raise StrataSourceError(
            f"object {key!r} is not a transaction index: {len(raw)} bytes is not a whole number "
            f"of {_TXN_ENTRY.size}-byte entries"
        )
    out = []
    for pos in range(0, len(raw), _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(raw, pos)
        if version != 0 or first > last:
            raise StrataSourceError(
                f"object {key!r}: entry {pos // _TXN_ENTRY.size} is not a transaction index entry "
                f"(version {version}, offsets {first} to {last})"
            )
        out.append((pid, first, last, lso))
    return out


def parse_open_transactions(raw: bytes) -> dict[int, int] | None:
    """Producer id → first offset of its open transaction, from a producer snapshot.

    None when the snapshot cannot be read (short, bad CRC, unknown version, counts
    its size cannot hold): the caller then replays the segment instead.
    """
    if len(raw) < _SNAPSHOT_HEAD.size:
        return None
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(raw)
    if version != _SNAPSHOT_VERSION or crc32c.crc32c(raw[6:]) != crc:
        return None
    if count < 0 or count * _SNAPSHOT_ENTRY.size > len(raw) - _SNAPSHOT_HEAD.size:
        return None
    pos = _SNAPSHOT_HEAD.size
    out: dict[int, int] = {}
    for _ in range(count):
        if pos + _SNAPSHOT_ENTRY.size > len(raw):
            return None
        pid, _epoch, _coordinator, _ts, txn_first, batches = _SNAPSHOT_ENTRY.unpack_from(raw, pos)
        pos += _SNAPSHOT_ENTRY.size + max(0, batches) * _SNAPSHOT_BATCH_BYTES
        if not 0 <= batches <= 5 or pos > len(raw):
            return None
        if txn_first >= 0:
            out[pid] = txn_first
    return out if pos == len(raw) else None


def overlapping(txns: Sequence[AbortedTxn], lo: int, hi: int) -> tuple[AbortedTxn, ...]:
    """The aborted transactions with records that may lie in ``[lo, hi)``."""
    return tuple(t for t in txns if t[2] >= lo and t[1] < hi)


_CACHE: OrderedDict[tuple[str, str, str], object] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _cached(bucket: Bucket, key: str, kind: str, load: Callable[[], _T]) -> _T:
    """``load()`` once per (bucket, object, kind) in this process: objects never change."""
    cache_key = (bucket.url, key, kind)
    with _CACHE_LOCK:
        if cache_key in _CACHE:
            _CACHE.move_to_end(cache_key)
            return _CACHE[cache_key]  # type: ignore[return-value]
    value = load()
    with _CACHE_LOCK:
        _CACHE[cache_key] = value
        while len(_CACHE) > _CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return value


class BucketTxns:
    """What the bucket says of one partition's transactions, for planning."""

    def __init__(self, bucket: Bucket, chunk_bytes: int) -> None:
        self.bucket = bucket
        self.chunk_bytes = chunk_bytes

    # -- the stable end -------------------------------------------------------------

    def stable_end(self, segments: Sequence[SegmentRef]) -> int:
        """First offset of the oldest transaction still open at the end of ``segments``
        (all the listed segments of a partition, in order); else their end."""
        end = segments[-1].last_offset + 1
        newest = len(segments) - 1
        state: dict[int, int] | None = None
        while newest >= 0:
            state = self._open_at_end(segments[newest])
            if state is not None:
                break
            newest -= 1
        open_txns = dict(state or {})
        for seg in segments[newest + 1:]:
            ended, opened = _cached(self.bucket, seg.key, "replay", functools.partial(self._replay, seg))
            for pid, first in ended.items():
                if first is None:
                    open_txns.pop(pid, None)
                else:
                    open_txns[pid] = first
            for pid, first in opened.items():
                open_txns.setdefault(pid, first)
        return min([end, *open_txns.values()])

    def _open_at_end(self, seg: SegmentRef) -> dict[int, int] | None:
        if not seg.snapshot_bytes:
            return None

        def load() -> dict[int, int] | None:
            return parse_open_transactions(self.bucket.get(seg.sibling("snapshot")))

        return _cached(self.bucket, seg.key, "snapshot", load)

    def _replay(self, seg: SegmentRef) -> _Effect:
        """What ``seg``'s batches do to the open transactions (Kafka's producer-state replay)."""
        ended: dict[int, int | None] = {}
        opened: dict[int, int] = {}
        for pid, base, control in transaction_batches(self.bucket, seg, self.chunk_bytes):
            if control:
                ended[pid] = None
                opened.pop(pid, None)
            elif pid in ended:
                if ended[pid] is None:
                    ended[pid] = base
            elif pid not in opened:
                opened[pid] = base
        return ended, opened

    # -- aborted transactions -------------------------------------------------------

    def _txn_index(self, seg: SegmentRef) -> list[tuple[int, int, int, int]]:
        key = seg.sibling("txnindex")
        return parse_txn_index(self.bucket.get(key), key)

    def aborted(self, segments: Sequence[SegmentRef], lo: int, hi: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[lo, hi)`` (Kafka's ``collectAbortedTxns``)."""
        out: list[AbortedTxn] = []
        for seg in segments:
            if seg.last_offset < lo or not seg.txn_index_bytes:
                continue
            entries = _cached(self.bucket, seg.key, "txnindex", functools.partial(self._txn_index, seg))
            for pid, first, last, lso in entries:
                if last >= lo and first < hi:
                    out.append((pid, first, last))
                if lso >= hi:
                    return out
        return out
