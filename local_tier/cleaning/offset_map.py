"""The cleaner's key → offset map over a log's dirty section (Kafka's ``SkimpyOffsetMap``).

Bounded by a byte budget (``log.cleaner.dedupe.buffer.size`` shared by the
cleaner threads): at most ``slots`` keys, of which the cleaner fills
``slots × log.cleaner.io.buffer.load.factor`` before it stops reading (the rest
of the dirty section is cleaned in a later pass). Keys of up to 16 bytes are
stored as they are (exact); longer keys by a 16-byte BLAKE2b digest, as Kafka
stores MD5 digests, tagged so a digest never equals a short key. A Python dict
entry costs about :data:`ENTRY_BYTES`, which is what the budget counts.

Not thread-safe: one map per cleaner thread.
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = ["ENTRY_BYTES", "OffsetMap", "map_key"]

#: what one entry costs in memory (dict slot, key object, int), for the budget
ENTRY_BYTES = 128
_RAW_KEY_MAX = 16
_DIGEST_TAG = b"\x00#"


def map_key(key: bytes) -> bytes:
    """The form a record key takes in the map (the key itself, or a tagged digest)."""
    if len(key) <= _RAW_KEY_MAX:
        return key
    return blake2b(key, digest_size=16).digest() + _DIGEST_TAG


class OffsetMap:
    """Key → the last offset seen for it, plus the last offset read into the map."""

    def __init__(self, memory_bytes: int) -> None:
        self.slots = max(1, memory_bytes // ENTRY_BYTES)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        self._map[map_key(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The last offset of ``key`` in the map; -1 when the key is not in it."""
        return self._map.get(map_key(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        """The map covers offsets up to ``offset`` (batches without keys, gaps)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots
