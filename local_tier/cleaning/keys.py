"""Produce to a compacted topic: every record needs a key (Kafka's ``LogValidator.validateKey``).

A compacted log keeps the last record *per key*, so a record without one has no
place in it (the cleaner would drop it). Kafka refuses the whole batch with
``INVALID_RECORD`` and a per-record error (Produce v8+ ``record_errors``) naming
each keyless record by its index in its batch; Strata does the same.

Pure function; thread-safe.
"""

from __future__ import annotations

from common.errors import CorruptRecordError, InvalidRecordError
from common.record.batch import ValidatedRecords
from local_tier.cleaning.batches import batch_records, walk_records

__all__ = ["require_keys"]


def require_keys(records: bytes | bytearray | memoryview, validated: ValidatedRecords, partition: str) -> None:
    """Raise InvalidRecordError (with ``record_errors``) when a data record has no key."""
    view = memoryview(records)
    for position, header in validated.headers:
        if header.is_control:
            continue
        batch = view[position : position + header.size]
        try:
            walked = walk_records(batch_records(batch, header), header.records_count)
        except CorruptRecordError as exc:
            raise InvalidRecordError(f"batch at offset delta {position}: {exc}") from None
        errors = tuple(
            (index, f"Compacted topic cannot accept message without key in topic partition {partition}.")
            for index, record in enumerate(walked)
            if record[1] is None
        )
        if errors:
            error = InvalidRecordError(
                f"{len(errors)} record(s) without a key in a batch for the compacted topic partition "
                f"{partition} (first: record {errors[0][0]}); cleanup.policy=compact needs a key per record"
            )
            error.record_errors = errors  # Produce v8+ record_errors
            raise error
