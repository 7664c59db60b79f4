"""Control records: the COMMIT/ABORT transaction markers, in Kafka's format.

A transaction marker is a batch with the transactional and control attribute
bits set, the producer's id and epoch, base sequence -1, and one record:

* key (6 bytes): ``version int16`` (0), ``type int16`` (0 ABORT, 1 COMMIT);
* value (6 bytes): ``version int16`` (0), ``coordinator_epoch int32``.

Consumers never see control records as data (every client skips them), and the
``read_committed`` isolation level uses ABORT markers to drop aborted records.
Pure functions; thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from common.errors import CorruptRecordError
from common.record.batch import BatchHeader, build_batch, decode_batch

__all__ = [
    "ControlType",
    "EndTransactionMarker",
    "build_marker_batch",
    "read_marker",
]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CURRENT_VERSION = 0


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """What a COMMIT or ABORT control record says."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type is ControlType.COMMIT


def build_marker_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
    timestamp_ms: int | None = None,
) -> bytes:
    """One control batch holding the COMMIT (``committed``) or ABORT marker."""
    kind = ControlType.COMMIT if committed else ControlType.ABORT
    key = _KEY.pack(_CURRENT_VERSION, kind)
    value = _VALUE.pack(_CURRENT_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, (), timestamp_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )


def read_marker(batch: bytes | bytearray | memoryview, pos: int = 0) -> EndTransactionMarker | None:
    """The marker of the control batch at ``pos``; None for another control type or an empty batch.

    Raises :class:`CorruptRecordError` when the batch is not a control batch or
    its record is malformed (key or value too short).
    """
    header, records = decode_batch(batch, pos)
    return marker_from(header, records[0].key if records else None, records[0].value if records else None)


def marker_from(header: BatchHeader, key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """The marker a control record's key and value describe (see :func:`read_marker`)."""
    if not header.is_control:
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a control batch")
    if key is None:
        return None
    if len(key) < _KEY.size:
        raise CorruptRecordError(f"control record at offset {header.base_offset} has a short key")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ControlType.ABORT, ControlType.COMMIT):
        return None  # another control type (e.g. KRaft's): not a transaction marker
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(f"transaction marker at offset {header.base_offset} has a short value")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTransactionMarker(ControlType(kind), coordinator_epoch)
