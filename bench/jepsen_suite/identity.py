"""Who wrote a record: the producer id, epoch and sequence of the batch that holds it.

A value found twice in a final log is a broker bug only when both copies carry the same
producer identity (id, epoch, sequence): the broker should have known the second for a
retry. An idempotent producer that bumps its epoch (librdkafka does, after an
OUT_OF_ORDER_SEQUENCE_NUMBER on a later in-flight batch) renumbers every record it holds
unacknowledged, and the new copy of a record already written is, to the broker, a new
record; Kafka writes it too. The checker tells the two apart with what is read here.

Read with hand-built Fetch v4 requests (:mod:`tests.e2e.rawtxn`), which share no code
with the broker, from whichever broker answers as the partition's leader.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from tests.e2e.rawkafka import Connection
from tests.e2e.rawtxn import fetch

__all__ = ["Identity", "producer_identities"]

#: (producer id, producer epoch, the record's sequence number)
Identity = tuple[int, int, int]

_NOT_LEADER = (6, 75)  # NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
_HEADER = 61  # a v2 batch header's bytes


def _batch_identities(records: bytes, wanted: set[int], out: dict[int, Identity]) -> int:
    """Note the identity of each ``wanted`` offset in ``records``; the offset after the
    last whole batch (-1: no whole batch)."""
    pos, after = 0, -1
    while pos + _HEADER <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if length < _HEADER - 12 or pos + 12 + length > len(records):
            break
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        pid, epoch, base_seq = struct.unpack_from(">qhi", records, pos + 43)
        for offset in wanted:
            if base <= offset <= base + last_delta:
                out[offset] = (pid, epoch, base_seq + offset - base if base_seq >= 0 else -1)
        after = base + last_delta + 1
        pos += 12 + length
    return after


def producer_identities(bootstraps: Iterable[str], topic: str,
                        wanted: dict[int, set[int]]) -> dict[tuple[int, int], Identity]:
    """``{(partition, offset): identity}`` for the ``wanted`` offsets of each partition that
    a broker answered for as leader (an offset left out could not be read)."""
    addresses = list(bootstraps)
    found: dict[tuple[int, int], Identity] = {}
    for partition, offsets in wanted.items():
        for address in addresses:
            got = _read_from(address, topic, partition, offsets)
            if got is not None:
                found.update({(partition, o): ident for o, ident in got.items()})
                break
    return found


def _read_from(address: str, topic: str, partition: int, offsets: set[int]) -> dict[int, Identity] | None:
    """The identities of ``offsets`` read from the broker at ``address``; None when it is not
    the partition's leader or cannot be reached."""
    try:
        conn = Connection.to(address, timeout=10.0)
    except OSError:
        return None
    out: dict[int, Identity] = {}
    try:
        offset, last = min(offsets), max(offsets)
        while offset <= last:
            got = fetch(conn, topic, partition, offset, isolation_level=0)
            if got.error_code in _NOT_LEADER:
                return None
            if got.error_code != 0 or not got.records:
                break
            after = _batch_identities(got.records, offsets, out)
            if after <= offset:
                break
            offset = after
    except (OSError, ConnectionError):
        return None
    finally:
        conn.sock.close()
    return out
