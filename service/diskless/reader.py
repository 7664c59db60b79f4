"""Reading the unmerged tail of a diskless partition: :class:`WalCache` and :func:`read_entries`.

ADR 0027, section 6. Committed entries name a byte range of a write-ahead object; the bytes
there are the batch as its producer sent it. A reader takes the object whole (one GET serves
every partition in it; the writer put the objects it wrote in its cache already), cuts the
entry's batch out, checks that it is the batch the entry describes (its size and offset
count: an entry never points a reader at other bytes) and writes the entry's base offset
and leader epoch into a copy (both outside the batch CRC, so nothing is recomputed).

:class:`WalCache` is not thread-safe: the event loop owns it. :func:`read_entries` runs
on the loop and awaits ``get_object`` for what the cache lacks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from common.errors import CorruptRecordError
from common.record.batch import read_batch_header, stamp_batch
from remote_tier.diskless.commits import CommitEntry

__all__ = ["WalCache", "committed_batch", "read_entries"]


class WalCache:
    """Whole write-ahead objects, least recently used dropped first past ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> bytes | None:
        data = self._objects.get(key)
        if data is None:
            self.misses += 1
            return None
        self.hits += 1
        self._objects.move_to_end(key)
        return data

    def put(self, key: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        old = self._objects.pop(key, None)
        self.size += len(data) - (len(old) if old is not None else 0)
        self._objects[key] = data
        while self.size > self.max_bytes:
            _, dropped = self._objects.popitem(last=False)
            self.size -= len(dropped)


async def read_entries(entries: Sequence[CommitEntry], cache: WalCache,
                       get_object: Callable[[str], Awaitable[bytes]], max_bytes: int) -> bytes:
    """The batches of ``entries`` (in order) with their offsets and leader epochs written
    in, as many as fit ``max_bytes`` but at least the first (as a Fetch answers)."""
    out = bytearray()
    for entry in entries:
        if out and len(out) + entry.size > max_bytes:
            break
        data = cache.get(entry.object_key)
        if data is None:
            data = await get_object(entry.object_key)
            cache.put(entry.object_key, data)
        out += committed_batch(entry, data)
    return bytes(out)


def committed_batch(entry: CommitEntry, data: bytes) -> bytearray:
    """``entry``'s batch cut from its object's bytes ``data``, checked to be the batch the
    entry describes, with the entry's base offset and leader epoch written in."""
    if entry.position < 0 or entry.position + entry.size > len(data):
        raise CorruptRecordError(f"the entry at offset {entry.base_offset} points past the end of "
                                 f"{entry.object_key} ({len(data)} bytes)")
    header = read_batch_header(data, entry.position)
    if header.size != entry.size or header.last_offset_delta + 1 != entry.record_count:
        raise CorruptRecordError(f"the batch at {entry.object_key}:{entry.position} is not the one "
                                 f"committed at offset {entry.base_offset}")
    batch = bytearray(data[entry.position:entry.position + entry.size])
    stamp_batch(batch, 0, base_offset=entry.base_offset, leader_epoch=entry.leader_epoch)
    return batch
