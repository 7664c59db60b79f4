"""The record format of ``__transaction_state``, byte for byte Kafka's.

One record per state change of a transactional id, key and value each starting
with an int16 version (Kafka's ``TransactionLogKey``/``TransactionLogValue``):

* key v0 (never flexible): ``transactional_id`` string;
* value v0: ``producer_id`` int64, ``producer_epoch`` int16,
  ``transaction_timeout_ms`` int32, ``transaction_status`` int8 (the
  :class:`~service.transactions.metadata.TxnState` id),
  ``transaction_partitions`` nullable array of ``(topic string, partition_ids
  []int32)``, ``last_update_timestamp_ms`` int64, ``start_timestamp_ms`` int64;
* value v1 is the flexible form of v0 (compact strings and arrays, unsigned
  varint lengths + 1) with tagged fields ``previous_producer_id`` (tag 0),
  ``next_producer_id`` (1), ``client_transaction_version`` (2) and
  ``next_producer_epoch`` (3).

Strata writes value v0 (what Kafka writes while ``transaction.version`` is 0,
the level this broker advertises) and reads both. The partitions array is null
in state Empty, as in Kafka. A null value is a tombstone (an expired
transactional id). Pure functions, no I/O. See
``docs/adr/0013-transaction-coordinator.md``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from service.groups.records import partition_for

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TxnLogValue",
    "TxnRecordFormatError",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
    "txn_partition_for",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
#: Longest transactional id accepted (an int16-length key string).
_MAX_STRING = 0x7FFF
#: Bound on a decoded array, so no length from a file allocates unbounded memory.
_MAX_ITEMS = 1 << 20


class TxnRecordFormatError(ValueError):
    """Bytes that are not a ``__transaction_state`` key or value this codec knows."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state_id: int
    #: topic → sorted partition ids; empty in state Empty (written as a null array)
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    next_producer_epoch: int = -1
    client_transaction_version: int = 0


@lru_cache(maxsize=4096)
def txn_partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions`` (cached: every request and
    every write of an id asks)."""
    return partition_for(transactional_id, partitions)


# ----------------------------------------------------------------------------- encode


def _string(value: str, out: bytearray) -> None:
    raw = value.encode("utf-8")
    if len(raw) > _MAX_STRING:
        raise TxnRecordFormatError(f"string of {len(raw)} bytes does not fit an int16 length")
    out += _I16.pack(len(raw))
    out += raw


def encode_txn_key(transactional_id: str) -> bytes:
    out = bytearray(_I16.pack(0))
    _string(transactional_id, out)
    return bytes(out)


def encode_txn_value(value: TxnLogValue) -> bytes:
    """Value v0 (the partitions array is null when there are none)."""
    out = bytearray(_I16.pack(0))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(value.state_id)
    if not value.partitions:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(value.partitions))
        for topic, ids in value.partitions:
            _string(topic, out)
            out += _I32.pack(len(ids))
            for p in ids:
                out += _I32.pack(p)
    out += _I64.pack(value.last_update_ms)
    out += _I64.pack(value.start_ms)
    return bytes(out)


# ----------------------------------------------------------------------------- decode


class _Reader:
    """Bounds-checked reads of the classic and flexible encodings."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise TxnRecordFormatError("record ends early")
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise TxnRecordFormatError("bad unsigned varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TxnRecordFormatError("field runs past the end of the record")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(chunk)

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.fixed(_I16)
        if n < 0:
            raise TxnRecordFormatError("null where a string is required")
        return self.raw(n).decode("utf-8")

    def array_length(self, flexible: bool) -> int:
        """-1 for a null array."""
        n = self.uvarint() - 1 if flexible else self.fixed(_I32)
        if n > _MAX_ITEMS or n > len(self.data) - self.pos:
            raise TxnRecordFormatError(f"array of {n} items runs past the end of the record")
        return max(n, -1)


def decode_txn_key(data: bytes) -> str:
    """The transactional id; TxnRecordFormatError for another coordinator's key."""
    r = _Reader(data)
    version = r.fixed(_I16)
    if version != 0:
        raise TxnRecordFormatError(f"unknown __transaction_state key version {version}")
    return r.string(False)


def decode_txn_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    version = r.fixed(_I16)
    if version not in (0, 1):
        raise TxnRecordFormatError(f"unknown __transaction_state value version {version}")
    flexible = version == 1
    producer_id = r.fixed(_I64)
    epoch = r.fixed(_I16)
    timeout = r.fixed(_I32)
    state_id = r.fixed(_I8)
    partitions: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(r.array_length(flexible)):
        topic = r.string(flexible)
        ids = tuple(r.fixed(_I32) for _ in range(max(r.array_length(flexible), 0)))
        if flexible:
            _skip_tags(r)
        partitions.append((topic, ids))
    last_update, start = r.fixed(_I64), r.fixed(_I64)
    tags = _read_tags(r) if flexible else {}
    return TxnLogValue(
        producer_id, epoch, timeout, state_id, tuple(partitions), last_update, start,
        previous_producer_id=tags.get("prev", -1),
        next_producer_id=tags.get("next", -1),
        next_producer_epoch=tags.get("next_epoch", -1),
        client_transaction_version=tags.get("tv", 0),
    )


def _skip_tags(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.raw(r.uvarint())


_TAGS = {0: ("prev", _I64), 1: ("next", _I64), 2: ("tv", _I16), 3: ("next_epoch", _I16)}


def _read_tags(r: _Reader) -> dict[str, int]:
    found: dict[str, int] = {}
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        chunk = r.raw(size)
        known = _TAGS.get(tag)
        if known is not None and size == known[1].size:
            found[known[0]] = int(known[1].unpack(chunk)[0])
    return found
